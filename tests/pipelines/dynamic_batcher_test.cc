#include "pipelines/dynamic_batcher.h"

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <thread>

namespace txscore::pipelines {
namespace {

using Clock = std::chrono::steady_clock;

TEST(DynamicBatcher, AnswersEachItemInOrderWithinItsBatch) {
  DynamicBatcher<int, int> batcher(
      {.max_batch = 4, .max_wait_us = 1000},
      [](const std::vector<int>& items) {
        std::vector<int> out;
        for (int x : items) out.push_back(x * 10);
        return out;
      },
      -1);
  auto a = batcher.Submit(1, Clock::now() + std::chrono::seconds(30));
  auto b = batcher.Submit(2, Clock::now() + std::chrono::seconds(30));
  EXPECT_EQ(a.get(), 10);
  EXPECT_EQ(b.get(), 20);
}

TEST(DynamicBatcher, ItemsPastTheirDeadlineAreAnsweredWithoutRunning) {
  DynamicBatcher<int, int> batcher(
      {}, [](const std::vector<int>& items) { return items; }, -1);
  EXPECT_EQ(batcher.Submit(5, Clock::now() - std::chrono::milliseconds(1)).get(), -1);
  EXPECT_TRUE(batcher.batch_sizes().empty());
}

TEST(DynamicBatcher, DeadlinesAreReadOnTheInjectedClock) {
  DynamicBatcherOptions options;
  options.clock = [] { return Clock::now() + std::chrono::hours(1); };  // an hour ahead
  DynamicBatcher<int, int> batcher(
      options, [](const std::vector<int>& items) { return items; }, -1);
  EXPECT_EQ(batcher.Submit(5, Clock::now() + std::chrono::minutes(1)).get(), -1);
  EXPECT_EQ(batcher.Submit(6, Clock::now() + std::chrono::hours(2)).get(), 6);
  EXPECT_EQ(batcher.batch_sizes(), std::vector<int>{1});
}

TEST(DynamicBatcher, QueuedItemsAreSplitIntoBatchesOfAtMostMaxBatch) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 2, .max_wait_us = 0},
      [&](const std::vector<int>& items) {
        if (first) {
          first = false;
          entered.set_value();
          released.wait();
        }
        return items;
      },
      -1);
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::vector<std::future<int>> answers;
  answers.push_back(batcher.Submit(0, later));
  entered.get_future().wait();
  for (int i = 1; i <= 4; ++i) answers.push_back(batcher.Submit(i, later));
  release.set_value();
  for (int i = 0; i <= 4; ++i) EXPECT_EQ(answers[static_cast<size_t>(i)].get(), i);
  EXPECT_EQ(batcher.batch_sizes(), (std::vector<int>{1, 2, 2}));
}

TEST(DynamicBatcher, RequestsTakeTheirPlacesBeforeBatchJobItems) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::vector<int>> batches;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 3, .max_wait_us = 0},
      [&](const std::vector<int>& items) {
        batches.push_back(items);
        if (batches.size() == 1) {
          entered.set_value();
          released.wait();
        }
        return items;
      },
      -1);
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::future<int> busy = batcher.Submit(0, later);
  entered.get_future().wait();  // the batcher is busy; what follows queues up
  std::vector<std::future<int>> job = batcher.SubmitAll({100, 101, 102, 103}, later, BatchPriority::kBatchJob);
  std::future<int> request_a = batcher.Submit(1, later);
  std::future<int> request_b = batcher.Submit(2, later);
  EXPECT_EQ(batcher.queued(), 6u);
  release.set_value();
  EXPECT_EQ(request_a.get(), 1);
  EXPECT_EQ(request_b.get(), 2);
  for (size_t i = 0; i < job.size(); ++i) EXPECT_EQ(job[i].get(), 100 + static_cast<int>(i));
  EXPECT_EQ(busy.get(), 0);
  // The two requests went first, alone, though the job's items were queued before them; the
  // job's items kept their order.
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0}, {1, 2}, {100, 101, 102}, {103}}));
}

TEST(DynamicBatcher, ApiCallersComeAfterRequestsAndBeforeBatchJobs) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::vector<int>> batches;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 3, .max_wait_us = 0},
      [&](const std::vector<int>& items) {
        batches.push_back(items);
        if (batches.size() == 1) {
          entered.set_value();
          released.wait();
        }
        return items;
      },
      -1);
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::future<int> busy = batcher.Submit(0, later);
  entered.get_future().wait();
  // Queued in the reverse of their priority: a job's items, then API calls, then a request.
  std::vector<std::future<int>> job = batcher.SubmitAll({100, 101}, later, BatchPriority::kBatchJob);
  std::vector<std::future<int>> api = batcher.SubmitAll({50, 51, 52}, later, BatchPriority::kApi);
  std::future<int> request = batcher.Submit(1, later);
  release.set_value();
  EXPECT_EQ(request.get(), 1);
  for (auto& f : api) f.get();
  for (auto& f : job) f.get();
  busy.get();
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0}, {1}, {50, 51, 52}, {100, 101}}));
}

// Waits (up to a minute: far beyond any machine's need) until `batcher` holds `n` items.
template <typename Batcher>
bool QueuedEventually(const Batcher& batcher, size_t n) {
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (batcher.queued() < n) {
    if (Clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(DynamicBatcher, ABatchWithoutRequestsMakesWayForARequestBetweenItsSteps) {
  std::promise<void> entered;
  std::vector<std::vector<int>> batches;
  size_t batches_after_making_way = 0;
  DynamicBatcher<int, int>* self = nullptr;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 4, .max_wait_us = 0},
      [&](const std::vector<int>& items, const std::function<void()>& make_way) {
        batches.push_back(items);
        if (items.front() >= 100) {  // the API batch: one step, then make way, then the rest
          entered.set_value();
          EXPECT_TRUE(QueuedEventually(*self, 1));
          make_way();
          batches_after_making_way = batches.size();
        }
        return items;
      },
      -1);
  self = &batcher;
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::vector<std::future<int>> api = batcher.SubmitAll({100, 101}, later, BatchPriority::kApi);
  entered.get_future().wait();
  std::future<int> request = batcher.Submit(1, later);
  EXPECT_EQ(request.get(), 1);
  EXPECT_EQ(api[0].get(), 100);
  EXPECT_EQ(api[1].get(), 101);
  // The request ran inside the API batch, before it ended.
  EXPECT_EQ(batches_after_making_way, 2u);
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{100, 101}, {1}}));
  EXPECT_EQ(batcher.nested_batches(), 1u);
}

TEST(DynamicBatcher, ARequestIsNeverBatchedWithApiCallsThatWouldOutlastIt) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::vector<int>> batches;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 4, .max_wait_us = 0},
      [&](const std::vector<int>& items) {
        batches.push_back(items);
        if (batches.size() == 1) {
          entered.set_value();
          released.wait();
        }
        return items;
      },
      -1);
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::future<int> busy = batcher.Submit(0, later, BatchPriority::kApi);
  entered.get_future().wait();
  std::vector<std::future<int>> api = batcher.SubmitAll({100, 101, 102, 103, 104, 105}, later, BatchPriority::kApi);
  std::future<int> request = batcher.Submit(1, later);
  release.set_value();
  EXPECT_EQ(request.get(), 1);
  for (auto& f : api) f.get();
  busy.get();
  // With places left in its batch, the request still ran alone.
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0}, {1}, {100, 101, 102, 103}, {104, 105}}));
}

TEST(DynamicBatcher, ABatchHoldingARequestMakesWayForNothing) {
  std::promise<void> entered;
  std::vector<std::vector<int>> batches;
  size_t batches_after_making_way = 0;
  DynamicBatcher<int, int>* self = nullptr;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 4, .max_wait_us = 0},
      [&](const std::vector<int>& items, const std::function<void()>& make_way) {
        batches.push_back(items);
        if (batches.size() == 1) {
          entered.set_value();
          EXPECT_TRUE(QueuedEventually(*self, 1));
          make_way();
          batches_after_making_way = batches.size();
        }
        return items;
      },
      -1);
  self = &batcher;
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::vector<std::future<int>> first = batcher.SubmitAll({0, 100}, later, BatchPriority::kInteractive);
  entered.get_future().wait();
  std::future<int> request = batcher.Submit(1, later);
  EXPECT_EQ(request.get(), 1);
  for (auto& f : first) f.get();
  EXPECT_EQ(batches_after_making_way, 1u);  // requests wait for a batch of requests to end
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0, 100}, {1}}));
  EXPECT_EQ(batcher.nested_batches(), 0u);
}

TEST(DynamicBatcher, ABatchJobMakesWayForRequestsButNotForApiCallers) {
  std::promise<void> entered;
  std::vector<std::vector<int>> batches;
  DynamicBatcher<int, int>* self = nullptr;
  DynamicBatcher<int, int> batcher(
      {.max_batch = 4, .max_wait_us = 0},
      [&](const std::vector<int>& items, const std::function<void()>& make_way) {
        batches.push_back(items);
        if (batches.size() == 1) {
          entered.set_value();
          EXPECT_TRUE(QueuedEventually(*self, 2));
          make_way();
        }
        return items;
      },
      -1);
  self = &batcher;
  const auto later = Clock::now() + std::chrono::seconds(30);
  std::future<int> job = batcher.Submit(200, later, BatchPriority::kBatchJob);
  entered.get_future().wait();
  std::future<int> api = batcher.Submit(100, later, BatchPriority::kApi);
  std::future<int> request = batcher.Submit(1, later);
  EXPECT_EQ(request.get(), 1);
  EXPECT_EQ(api.get(), 100);
  EXPECT_EQ(job.get(), 200);
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{200}, {1}, {100}}));
  EXPECT_EQ(batcher.nested_batches(), 1u);
}

}  // namespace
}  // namespace txscore::pipelines
