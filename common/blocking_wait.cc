#include "common/blocking_wait.h"

namespace txscore {
namespace {
thread_local BlockingWaitObserver* thread_observer = nullptr;
thread_local std::shared_ptr<ContinuationHost> thread_host;
}  // namespace

std::shared_ptr<ContinuationHost> SetThreadContinuationHost(std::shared_ptr<ContinuationHost> host) {
  std::swap(host, thread_host);
  return host;
}

const std::shared_ptr<ContinuationHost>& ThreadContinuationHost() { return thread_host; }

BlockingWaitObserver* SetThreadBlockingWaitObserver(BlockingWaitObserver* observer) {
  BlockingWaitObserver* previous = thread_observer;
  thread_observer = observer;
  return previous;
}

ScopedBlockingWait::ScopedBlockingWait() {
  // Cleared while the wait lasts: a wait nested inside this one is the same wait.
  BlockingWaitObserver* observer = SetThreadBlockingWaitObserver(nullptr);
  const BlockingWaitObserver::Answer answer =
      observer != nullptr ? observer->Begin() : BlockingWaitObserver::Answer::kNotCounted;
  if (answer == BlockingWaitObserver::Answer::kCounted) {
    counted_ = observer;
  } else {
    refused_ = answer == BlockingWaitObserver::Answer::kRefused;
    SetThreadBlockingWaitObserver(observer);
  }
}

ScopedBlockingWait::~ScopedBlockingWait() {
  if (counted_ == nullptr) return;
  counted_->End();
  SetThreadBlockingWaitObserver(counted_);
}

}  // namespace txscore
