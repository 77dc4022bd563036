#include "common/blocking_wait.h"

namespace txscore {
namespace {
thread_local BlockingWaitObserver* thread_observer = nullptr;
}  // namespace

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
