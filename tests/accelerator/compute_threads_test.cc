#include "accelerator/compute_threads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace txscore::accelerator {
namespace {

// libtorch's count on a thread started now (what a stage's new worker thread starts with).
int CountOnANewThread() {
  int count = 0;
  std::thread([&] { count = ComputeThreads(); }).join();
  return count;
}

// A thread that has already run tensor work, as another stage's worker has; Ask() runs a
// function on it and waits for the answer.
class OtherStageThread {
 public:
  OtherStageThread() : thread_([this] { Loop(); }) { Ask(ComputeThreads); }
  ~OtherStageThread() {
    Post({});
    thread_.join();
  }
  int Ask(std::function<int()> question) {
    Post(std::move(question));
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !question_ && answered_; });
    answered_ = false;
    return answer_;
  }

 private:
  void Post(std::function<int()> question) {
    std::lock_guard<std::mutex> lock(mu_);
    question_ = std::move(question);
    stop_ = !question_;
    cv_.notify_all();
  }
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || question_; });
      if (stop_) return;
      answer_ = question_();
      question_ = nullptr;
      answered_ = true;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<int()> question_;
  int answer_ = 0;
  bool answered_ = false;
  bool stop_ = false;
  std::thread thread_;
};

TEST(ScopedComputeThreads, SetsTheCallingThreadsCountOnlyAndPutsItBack) {
  OtherStageThread other;
  const int here = ComputeThreads();
  const int there = other.Ask(ComputeThreads);
  const int fresh = CountOnANewThread();
  const int blas = BlasThreads();
  const int wanted = std::max({here, there, fresh, blas}) + 1;
  {
    ScopedComputeThreads scoped(wanted);
    EXPECT_EQ(ComputeThreads(), wanted);
    EXPECT_EQ(other.Ask(ComputeThreads), there);
    EXPECT_EQ(CountOnANewThread(), fresh);
    EXPECT_EQ(BlasThreads(), blas);
  }
  EXPECT_EQ(ComputeThreads(), here);
}

TEST(ScopedComputeThreads, ZeroChangesNothing) {
  const int here = ComputeThreads();
  ScopedComputeThreads scoped(0);
  EXPECT_EQ(ComputeThreads(), here);
}

// The libtorch behaviour the design rests on (libtorch 1.13, OpenMP backend): the process-wide
// setter reaches threads that start later and OpenBLAS, but not a thread that already ran
// tensor work. (It changes this process's settings: CTest runs each test in a process of its
// own.)
TEST(SetComputeThreads, ReachesNewThreadsAndOpenBlasButNotRunningThreads) {
  OtherStageThread other;
  const int here = ComputeThreads();
  const int there = other.Ask(ComputeThreads);
  const int fresh = CountOnANewThread();
  const int blas = BlasThreads();
  const int wanted = std::max({here, there, fresh, blas}) + 1;
  SetComputeThreads(wanted);
  EXPECT_EQ(ComputeThreads(), wanted);
  EXPECT_EQ(CountOnANewThread(), wanted);
  EXPECT_EQ(other.Ask(ComputeThreads), there);
  if (blas > 0) {
    EXPECT_EQ(BlasThreads(), wanted);
  }
  SetComputeThreads(fresh);
}

}  // namespace
}  // namespace txscore::accelerator
