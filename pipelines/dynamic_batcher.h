// A dynamic batcher: callers submit single items from any thread; one worker thread collects
// them into batches of at most `max_batch`, waiting at most `max_wait_us` after the first item
// of a batch for more to arrive, and runs each batch with one call. Accelerator stages use it
// so that concurrent requests (and batch jobs) share forward passes.
//
// Each item carries a deadline: an item whose deadline has passed when its batch is formed is
// answered with `expired` without being run.
//
// Three priorities (BatchPriority): while interactive items (synchronous requests) wait, a
// batch holds them alone, since an item is answered only when its whole batch ends and a
// request must not wait for an API call's or a job's longer generation; otherwise API items
// come first and batch-job items take the places left. A long
// batch that holds no interactive item makes way between its steps: the run function calls
// `make_way`, which runs the interactive items waiting at that moment as a batch of their own
// (nested, one level deep), so an API generation or a batch job delays a request by one step
// of its batch, not by the whole batch. Items submitted together with SubmitAll are queued at
// once, so when nothing else is waiting they form the same batches on every run.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/thread_priority.h"

namespace txscore::pipelines {

// Who waits for a batch place, most urgent first: a synchronous request (a transaction under
// review), a caller of the OpenAI-compatible API, a batch job. A batch takes from the first
// queue, then fills the places left from the next.
enum class BatchPriority { kInteractive, kApi, kBatchJob };

struct DynamicBatcherOptions {
  int max_batch = 8;           // Default: 8 items per batch
  int64_t max_wait_us = 2000;  // Default: 2 ms from the first item of a batch
  // Default: false. The worker thread runs at the OS's lowest priority (common/thread_priority.h):
  // for a batch job's own model beside a server's requests.
  bool background = false;
  // The clock items' deadlines are time points of (common/clock.h). Default: steady_clock. The
  // wait for company (max_wait_us) is real time.
  DeadlineClock clock = SteadyDeadlineClock();
};

template <typename Item, typename Answer>
class DynamicBatcher {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs one batch; returns one answer per item, in order. Called on the worker thread only.
  // A run that takes many steps calls `make_way` between them (it returns at once when there
  // is nothing to make way for).
  using MakeWay = std::function<void()>;
  using RunBatch = std::function<std::vector<Answer>(const std::vector<Item>& items, const MakeWay& make_way)>;
  // A batch run in one go, that never makes way.
  using RunWholeBatch = std::function<std::vector<Answer>(const std::vector<Item>& items)>;

  DynamicBatcher(DynamicBatcherOptions options, RunBatch run, Answer expired)
      : options_(options), run_(std::move(run)), expired_(std::move(expired)), worker_([this] { Work(); }) {}
  DynamicBatcher(DynamicBatcherOptions options, RunWholeBatch run, Answer expired)
      : DynamicBatcher(
            options, [run = std::move(run)](const std::vector<Item>& items, const MakeWay&) { return run(items); },
            std::move(expired)) {}

  ~DynamicBatcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  std::future<Answer> Submit(Item item, Clock::time_point deadline,
                             BatchPriority priority = BatchPriority::kInteractive) {
    std::vector<Item> items;
    items.push_back(std::move(item));
    return std::move(SubmitAll(std::move(items), deadline, priority).front());
  }

  // Queues all `items` under one lock; one future per item, in order.
  std::vector<std::future<Answer>> SubmitAll(std::vector<Item> items, Clock::time_point deadline,
                                             BatchPriority priority) {
    std::vector<std::future<Answer>> futures;
    std::vector<Answered> answered;
    for (size_t i = 0; i < items.size(); ++i) {
      auto promise = std::make_shared<std::promise<Answer>>();
      futures.push_back(promise->get_future());
      answered.push_back([promise](Answer answer) { promise->set_value(std::move(answer)); });
    }
    Queue(std::move(items), std::move(answered), deadline, priority);
    return futures;
  }
  // Queues `item`; `answered` is called once with its answer, on the worker thread (it must
  // be quick: hand real work to another thread), so that nobody has to wait for it.
  using Answered = std::function<void(Answer)>;
  void SubmitThen(Item item, Clock::time_point deadline, BatchPriority priority, Answered answered) {
    std::vector<Item> items;
    items.push_back(std::move(item));
    std::vector<Answered> each;
    each.push_back(std::move(answered));
    Queue(std::move(items), std::move(each), deadline, priority);
  }
  // Items waiting for a batch, of both priorities (tests).
  size_t queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return Waiting();
  }

  // Sizes of the batches run so far, in order (tests and metrics).
  std::vector<int> batch_sizes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return batch_sizes_;
  }

  // Batches of interactive items run inside another batch, between its steps (make_way).
  uint64_t nested_batches() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return nested_batches_;
  }

 private:
  struct Pending {
    Item item;
    Clock::time_point deadline;
    Answered answered;
    BatchPriority priority;
  };
  void Queue(std::vector<Item> items, std::vector<Answered> answered, Clock::time_point deadline,
             BatchPriority priority) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::deque<Pending>& queue = queues_[static_cast<size_t>(priority)];
      for (size_t i = 0; i < items.size(); ++i) {
        queue.push_back({std::move(items[i]), deadline, std::move(answered[i]), priority});
      }
    }
    wake_.notify_all();
  }

  void Work() {
    // Best effort: a batcher that cannot lower its priority still batches.
    if (options_.background) (void)LowerThisThreadPriority();
    while (true) {
      std::vector<Pending> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        auto waiting = [this] { return static_cast<int>(Waiting()); };
        wake_.wait(lock, [&] { return stopping_ || waiting() > 0; });
        if (stopping_ && waiting() == 0) return;
        // The first item opens the batch; wait a little for company.
        const Clock::time_point close = Clock::now() + std::chrono::microseconds(options_.max_wait_us);
        wake_.wait_until(lock, close, [&] { return stopping_ || waiting() >= options_.max_batch; });
        // Requests alone when any wait: a request answers when its whole batch ends, so it must
        // not ride with an API call's or a job's longer generation. The others share batches.
        const bool requests_waiting = !queues_[static_cast<size_t>(BatchPriority::kInteractive)].empty();
        for (std::deque<Pending>& queue : queues_) {
          if (requests_waiting && &queue != &queues_[static_cast<size_t>(BatchPriority::kInteractive)]) break;
          while (!queue.empty() && static_cast<int>(batch.size()) < options_.max_batch) {
            batch.push_back(std::move(queue.front()));
            queue.pop_front();
          }
        }
      }
      Run(batch, false);
    }
  }

  // Runs `batch`, answering each item (expired ones without running them). `nested`: inside
  // another batch's make_way, so this one makes way for nothing.
  void Run(std::vector<Pending>& batch, bool nested) {
    std::vector<Item> items;
    std::vector<Pending*> live;
    bool urgent = nested;
    const Clock::time_point now = options_.clock();
    for (Pending& p : batch) {
      if (p.deadline <= now) {
        p.answered(expired_);
      } else {
        items.push_back(p.item);
        live.push_back(&p);
        urgent = urgent || p.priority == BatchPriority::kInteractive;
      }
    }
    if (items.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      batch_sizes_.push_back(static_cast<int>(items.size()));
      if (nested) ++nested_batches_;
    }
    const MakeWay make_way = [this, urgent] {
      if (!urgent) RunWaitingInteractive();
    };
    std::vector<Answer> answers = run_(items, make_way);
    for (size_t i = 0; i < live.size(); ++i) {
      live[i]->answered(i < answers.size() ? std::move(answers[i]) : expired_);
    }
  }

  // make_way: the interactive items waiting now, at once (no wait for company).
  void RunWaitingInteractive() {
    std::vector<Pending> batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::deque<Pending>& queue = queues_[static_cast<size_t>(BatchPriority::kInteractive)];
      while (!queue.empty() && static_cast<int>(batch.size()) < options_.max_batch) {
        batch.push_back(std::move(queue.front()));
        queue.pop_front();
      }
    }
    if (!batch.empty()) Run(batch, true);
  }

  const DynamicBatcherOptions options_;
  const RunBatch run_;
  const Answer expired_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // One queue per BatchPriority, in its order. Called with mutex_ held.
  size_t Waiting() const {
    size_t n = 0;
    for (const std::deque<Pending>& queue : queues_) n += queue.size();
    return n;
  }
  std::array<std::deque<Pending>, 3> queues_;  // by BatchPriority
  std::vector<int> batch_sizes_;
  uint64_t nested_batches_ = 0;
  bool stopping_ = false;
  std::thread worker_;  // last: starts after everything above exists
};

}  // namespace txscore::pipelines
