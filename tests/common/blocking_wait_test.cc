#include "common/blocking_wait.h"

#include <gtest/gtest.h>

#include <thread>

namespace txscore {
namespace {

// Counts the waits it is told of; takes them only while `accept` is true.
class CountingObserver : public BlockingWaitObserver {
 public:
  bool Begin() override {
    ++begun;
    return accept;
  }
  void End() override { ++ended; }
  bool accept = true;
  int begun = 0, ended = 0;
};

// Installs `observer` on the calling thread for the scope, as a pool does on its threads.
class Installed {
 public:
  explicit Installed(BlockingWaitObserver* observer) : previous_(SetThreadBlockingWaitObserver(observer)) {}
  ~Installed() { SetThreadBlockingWaitObserver(previous_); }

 private:
  BlockingWaitObserver* previous_;
};

TEST(BlockingWait, TheThreadsObserverIsToldWhenAWaitBeginsAndEnds) {
  CountingObserver observer;
  Installed installed(&observer);
  {
    ScopedBlockingWait waiting;
    EXPECT_EQ(observer.begun, 1);
    EXPECT_EQ(observer.ended, 0);
  }
  EXPECT_EQ(observer.ended, 1);
}

TEST(BlockingWait, AWaitInsideAWaitIsTheSameWait) {
  CountingObserver observer;
  Installed installed(&observer);
  {
    ScopedBlockingWait outer;
    ScopedBlockingWait inner;
  }
  EXPECT_EQ(observer.begun, 1);
  EXPECT_EQ(observer.ended, 1);
  ScopedBlockingWait again;  // the observer is back for the next wait
  EXPECT_EQ(observer.begun, 2);
}

TEST(BlockingWait, AWaitTheObserverDidNotTakeIsNotEnded) {
  CountingObserver observer;
  observer.accept = false;
  Installed installed(&observer);
  { ScopedBlockingWait waiting; }
  EXPECT_EQ(observer.begun, 1);
  EXPECT_EQ(observer.ended, 0);
}

TEST(BlockingWait, AnObserverBelongsToTheThreadThatInstalledIt) {
  CountingObserver observer;
  Installed installed(&observer);
  std::thread([] { ScopedBlockingWait waiting; }).join();  // no observer there: nothing happens
  EXPECT_EQ(observer.begun, 0);
}

}  // namespace
}  // namespace txscore
