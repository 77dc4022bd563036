// Telling a thread pool that the thread it lent is about to wait a long time for another
// component (the LLM stage's batcher, a remote model), so the pool can give that thread's
// place to other work meanwhile: the RPC server frees the waiting request's worker slot, so
// that requests which need no LLM keep being run (service/rpc_server.h).
//
// A pool installs an observer on each of its threads; code that may wait long wraps the wait
// in a ScopedBlockingWait. On a thread with no observer (a batch job's, a test's) it does
// nothing.
#pragma once

namespace txscore {

class BlockingWaitObserver {
 public:
  virtual ~BlockingWaitObserver() = default;
  // The thread is about to wait. Returns whether the observer counted it (End is then called).
  virtual bool Begin() = 0;
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
  ScopedBlockingWait(const ScopedBlockingWait&) = delete;
  ScopedBlockingWait& operator=(const ScopedBlockingWait&) = delete;

 private:
  BlockingWaitObserver* counted_ = nullptr;  // the observer whose Begin counted this wait
};

}  // namespace txscore
