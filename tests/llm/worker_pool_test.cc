// The decode step's thread pool (llm/cpu_kernels/worker_pool.h). Also run under ThreadSanitizer
// (scripts/tsan.sh).
#include "llm/cpu_kernels/worker_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace txscore::llm::cpu {
namespace {

TEST(WorkerPool, RunCallsEachThreadIndexOnceEachOnItsOwnThreadTheCallersFirst) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  for (int round = 0; round < 200; ++round) {  // back to back, as a step's regions come
    std::mutex mutex;
    std::vector<int> indices;
    std::set<std::thread::id> threads;
    std::thread::id caller_ran_zero;
    pool.Run([&](int t) {
      std::lock_guard<std::mutex> lock(mutex);
      indices.push_back(t);
      threads.insert(std::this_thread::get_id());
      if (t == 0) caller_ran_zero = std::this_thread::get_id();
    });
    std::sort(indices.begin(), indices.end());
    ASSERT_EQ(indices, (std::vector<int>{0, 1, 2})) << "round " << round;
    ASSERT_EQ(threads.size(), 3u) << "round " << round;
    ASSERT_EQ(caller_ran_zero, std::this_thread::get_id());
  }
}

TEST(WorkerPool, RunsAfterItsWorkersHaveGoneToSleep) {
  WorkerPool pool(2, std::chrono::microseconds(0));  // no spin: a worker sleeps when idle
  std::atomic<int> calls{0};
  for (uint64_t round = 0; round < 20; ++round) {
    // The worker sleeps once after starting and once after each Run: wait for that (it will,
    // with nothing to do), then wake it.
    while (pool.sleeps() < round + 1) std::this_thread::yield();
    pool.Run([&](int) { calls.fetch_add(1); });
  }
  EXPECT_EQ(calls.load(), 40);
}

TEST(WorkerPool, WorkersRunInTheSchedulingClassOfTheThreadThatMadeThePool) {
  std::thread maker([] {
    sched_param param{};
    ASSERT_EQ(pthread_setschedparam(pthread_self(), SCHED_IDLE, &param), 0);
    WorkerPool pool(3);
    std::atomic<int> idle{0};
    pool.Run([&](int) {
      if (sched_getscheduler(0) == SCHED_IDLE) idle.fetch_add(1);
    });
    EXPECT_EQ(idle.load(), 3);
  });
  maker.join();
  WorkerPool normal(2);
  std::atomic<int> idle{0};
  normal.Run([&](int) {
    if (sched_getscheduler(0) == SCHED_IDLE) idle.fetch_add(1);
  });
  EXPECT_EQ(idle.load(), 0);
}

TEST(WorkerPool, AnExceptionFromTheCallersShareComesBackAfterTheWorkersAreDone) {
  WorkerPool pool(2);
  std::atomic<bool> worker_done{false};
  EXPECT_THROW(pool.Run([&](int t) {
    if (t == 0) throw std::runtime_error("caller's share failed");
    // Late on purpose: Run must wait for it, not return as soon as the caller's share threw.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    worker_done = true;
  }),
               std::runtime_error);
  EXPECT_TRUE(worker_done.load());
  std::atomic<int> calls{0};
  pool.Run([&](int) { calls.fetch_add(1); });  // still usable
  EXPECT_EQ(calls.load(), 2);
}

TEST(WorkerPool, AnExceptionFromAWorkersShareComesBackFromRun) {
  WorkerPool pool(3);
  std::atomic<int> finished{0};
  try {
    pool.Run([&](int t) {
      if (t == 2) throw std::length_error("worker 2's share failed");
      finished.fetch_add(1);
    });
    ADD_FAILURE() << "Run returned normally";
  } catch (const std::length_error& e) {
    EXPECT_STREQ(e.what(), "worker 2's share failed");
  }
  EXPECT_EQ(finished.load(), 2);
  std::atomic<int> calls{0};
  pool.Run([&](int) { calls.fetch_add(1); });  // still usable, and the error does not come back
  EXPECT_EQ(calls.load(), 3);
}

TEST(WorkerPool, CallersOnSeveralThreadsTakeTurns) {
  WorkerPool pool(2);
  std::atomic<int> inside{0}, most_inside{0}, calls{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        pool.Run([&](int) {
          const int now = inside.fetch_add(1) + 1;
          int seen = most_inside.load();
          while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
          }
          calls.fetch_add(1);
          inside.fetch_sub(1);
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(calls.load(), 4 * 50 * 2);
  EXPECT_LE(most_inside.load(), 2);  // one Run's two threads at most
}

TEST(WorkerPool, OneThreadRunsOnTheCallerAlone) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.threads(), 1);
  std::thread::id ran;
  pool.Run([&](int t) {
    EXPECT_EQ(t, 0);
    ran = std::this_thread::get_id();
  });
  EXPECT_EQ(ran, std::this_thread::get_id());
}

TEST(ParallelRanges, CoverEveryIndexOnceInAlignedRanges) {
  WorkerPool pool(3);
  for (int64_t count : {1, 15, 16, 17, 100, 4864}) {
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    ParallelRanges(pool, count, 16, [&](int64_t begin, int64_t end) {
      std::lock_guard<std::mutex> lock(mutex);
      ranges.emplace_back(begin, end);
    });
    std::sort(ranges.begin(), ranges.end());
    ASSERT_FALSE(ranges.empty());
    EXPECT_EQ(ranges.front().first, 0) << count;
    EXPECT_EQ(ranges.back().second, count) << count;
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_LT(ranges[i].first, ranges[i].second) << count;
      if (i > 0) {
        EXPECT_EQ(ranges[i].first, ranges[i - 1].second) << count;
      }
      if (i + 1 < ranges.size()) {
        EXPECT_EQ(ranges[i].second % 16, 0) << count;
      }
    }
    EXPECT_LE(ranges.size(), static_cast<size_t>(3 * kChunksPerThread)) << count;
  }
}

// The threads share the work by taking chunks in turn: while the caller's thread is held up
// in its first chunk, the worker does all the others (a fixed split would leave the caller's
// half waiting for it, and this test would fail after its 10 s bound).
TEST(ParallelRanges, AThreadHeldUpLeavesTheRestOfTheWorkToTheOthers) {
  WorkerPool pool(2);
  constexpr int64_t kCount = 4864;
  std::atomic<int> chunks{0}, by_caller{0}, by_worker{0};
  std::atomic<int> counted{0};
  ParallelRanges(pool, kCount, 16, [&](int64_t, int64_t) { ++counted; });  // how many chunks there are
  const int total = counted.load();
  ASSERT_GT(total, 2);
  const std::thread::id caller = std::this_thread::get_id();
  ParallelRanges(pool, kCount, 16, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) {
      ++by_caller;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (chunks.load() < total - 1 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    } else {
      ++by_worker;
    }
    ++chunks;
  });
  EXPECT_EQ(chunks.load(), total);
  EXPECT_LE(by_caller.load(), 1);
  EXPECT_GE(by_worker.load(), total - 1);
}

}  // namespace
}  // namespace txscore::llm::cpu
