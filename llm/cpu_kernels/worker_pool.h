// The threads a decode step's products are split over. A decode step has about a hundred
// parallel regions of a fraction of a millisecond each; libtorch's OpenMP regions, tried
// first, gave two threads no speed-up over one on these short regions (docs/llm.md, "CPU
// kernels"), so the step keeps its own workers: they spin briefly between regions, as
// llama.cpp's do, and sleep when no step comes.
//
// Workers are started by the constructor's thread and inherit its scheduling class: a pool
// made on an idle-priority thread (a claims job's batcher) runs at idle priority too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace txscore::llm::cpu {

class WorkerPool {
 public:
  // How long an idle worker polls for the next Run before it sleeps: longer than the gap
  // between a decode step's regions (microseconds), far shorter than between requests.
  static constexpr std::chrono::microseconds kDefaultSpin{200};

  // threads - 1 workers; the caller of Run is the last thread. threads < 1 counts as 1.
  explicit WorkerPool(int threads, std::chrono::microseconds spin = kDefaultSpin);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // How many times a worker has gone to sleep (for tests: the wake-up path ran).
  uint64_t sleeps() const { return sleeps_.load(); }

  // Calls fn(t) once for each t < threads(), each on its own thread (t = 0 on the caller's),
  // and returns when all have returned. Calls from several threads take turns. An exception
  // from any fn(t) (a std::bad_alloc under memory pressure, say) is rethrown here once every
  // thread is done, the caller's own first, else the first a worker caught; the pool stays
  // usable.
  void Run(const std::function<void(int)>& fn);

 private:
  void Work(int index);

  const std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one Run at a time
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped for each Run
  std::atomic<int> pending_{0};          // workers still on the current job
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> sleeps_{0};
  std::mutex error_mutex_;
  std::exception_ptr worker_error_;  // the first exception a worker caught in this Run
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
};

// Runs fn(begin, end) on the pool over chunks that cover [0, count) once, boundaries on
// multiples of `alignment`. The threads take chunks in turn until none is left (about
// kChunksPerThread each), so a thread slowed by something else on its core takes fewer
// instead of holding up the others at the end (BM_DecodeProducts: a fixed half each ran two
// threads at 1.3x one thread's speed).
constexpr int64_t kChunksPerThread = 8;
void ParallelRanges(WorkerPool& pool, int64_t count, int64_t alignment,
                    const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace txscore::llm::cpu
