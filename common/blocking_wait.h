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
#pragma once

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

}  // namespace txscore
