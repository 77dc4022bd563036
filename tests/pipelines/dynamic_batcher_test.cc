#include "pipelines/dynamic_batcher.h"

#include <gtest/gtest.h>

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
  // The two requests went first, though the job's items were queued before them; the job's
  // items kept their order.
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0}, {1, 2, 100}, {101, 102, 103}}));
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
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0}, {1, 50, 51}, {52, 100, 101}}));
}

}  // namespace
}  // namespace txscore::pipelines
