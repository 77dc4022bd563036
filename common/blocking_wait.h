// Telling a thread pool that the thread it lent is about to wait a long time for another
// component (the LLM stage's batcher, a remote model), so the pool can give that thread's
// place to other work meanwhile: the RPC server frees the waiting request's worker slot, so
// that requests which need no LLM keep being run (service/rpc_server.h).
//
// A pool installs an observer on each of its threads; code that may wait long wraps the wait
// in a ScopedBlockingWait, and does not wait at all when the pool refuses it (every place it
// keeps for waiting threads is taken: the request then goes on without what it would have
// waited for, rather than hold a worker). On a thread with no observer (a batch job's, a
// test's) it does nothing.
//
// Better still, a pool may offer a ContinuationHost: code that can wait without a thread (the
// LLM stage on the local model) hands the rest of its work to the host, to be run when the
// answer comes, and the thread goes back to the pool at once. The RPC server offers one for
// score(); batch jobs and tests do not, and wait the blocking way.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace txscore {

class BlockingWaitObserver {
 public:
  virtual ~BlockingWaitObserver() = default;
  enum class Answer {
    kCounted,     // the pool lends the thread's place meanwhile; End is called when the wait is over
    kNotCounted,  // the thread waits keeping its place (the pool lends none)
    kRefused,     // the pool has no room for another waiting thread: do not wait
  };
  // The thread is about to wait.
  virtual Answer Begin() = 0;
  // The wait that Begin counted is over; the thread goes on with its work.
  virtual void End() = 0;
};

// Installs `observer` (not owned; null: none) for the calling thread. Returns the previous one.
BlockingWaitObserver* SetThreadBlockingWaitObserver(BlockingWaitObserver* observer);

// Begin on construction and End on destruction, on the calling thread's observer if any.
class ScopedBlockingWait {
 public:
  ScopedBlockingWait();
  ~ScopedBlockingWait();
  // The thread's pool refused this wait: the caller must not wait (skip the work instead).
  bool refused() const { return refused_; }
  ScopedBlockingWait(const ScopedBlockingWait&) = delete;
  ScopedBlockingWait& operator=(const ScopedBlockingWait&) = delete;

 private:
  BlockingWaitObserver* counted_ = nullptr;  // the observer whose Begin counted this wait
  bool refused_ = false;
};

// A pool that runs work handed to it later, on its own threads. Thread-safe.
class ContinuationHost {
 public:
  virtual ~ContinuationHost() = default;
  // Runs `work` soon on one of the pool's threads (never on the calling thread inside Post).
  virtual void Post(std::function<void()> work) = 0;
  // Runs `work` on one of the pool's threads once `when` has come.
  virtual void PostAt(std::chrono::steady_clock::time_point when, std::function<void()> work) = 0;
};

// Installs `host` (null: none) for the calling thread; returns the previous one.
std::shared_ptr<ContinuationHost> SetThreadContinuationHost(std::shared_ptr<ContinuationHost> host);
// The calling thread's host, or null.
const std::shared_ptr<ContinuationHost>& ThreadContinuationHost();

}  // namespace txscore
