#include "common/blocking_wait.h"

#include <gtest/gtest.h>

#include <thread>

namespace txscore {
namespace {

// Counts the waits it is told of and answers each with `answer`.
class CountingObserver : public BlockingWaitObserver {
 public:
  Answer Begin() override {
    ++begun;
    return answer;
  }
  void End() override { ++ended; }
  Answer answer = Answer::kCounted;
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
    EXPECT_FALSE(waiting.refused());
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

TEST(BlockingWait, AWaitTheObserverDidNotTakeIsNotEndedNorRefused) {
  CountingObserver observer;
  observer.answer = BlockingWaitObserver::Answer::kNotCounted;
  Installed installed(&observer);
  {
    ScopedBlockingWait waiting;
    EXPECT_FALSE(waiting.refused());
  }
  EXPECT_EQ(observer.begun, 1);
  EXPECT_EQ(observer.ended, 0);
}

TEST(BlockingWait, ARefusedWaitSaysSoAndIsNotEnded) {
  CountingObserver observer;
  observer.answer = BlockingWaitObserver::Answer::kRefused;
  Installed installed(&observer);
  {
    ScopedBlockingWait waiting;
    EXPECT_TRUE(waiting.refused());
  }
  EXPECT_EQ(observer.begun, 1);
  EXPECT_EQ(observer.ended, 0);
  observer.answer = BlockingWaitObserver::Answer::kCounted;
  ScopedBlockingWait again;  // the observer is back for the next wait
  EXPECT_FALSE(again.refused());
  EXPECT_EQ(observer.begun, 2);
}

TEST(BlockingWait, AnObserverBelongsToTheThreadThatInstalledIt) {
  CountingObserver observer;
  Installed installed(&observer);
  bool refused_there = true;
  std::thread([&] {
    ScopedBlockingWait waiting;  // no observer there: nothing happens, and the wait is not refused
    refused_there = waiting.refused();
  }).join();
  EXPECT_EQ(observer.begun, 0);
  EXPECT_FALSE(refused_there);
}

}  // namespace
}  // namespace txscore
