#include "llm/cpu_kernels/worker_pool.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace txscore::llm::cpu {
namespace {

// One poll of a spin loop: x86's pause tells the core this is a wait, so a hyperthread
// sibling (the other vCPU of a small VM may be one) gets the core's resources meanwhile.
inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

WorkerPool::WorkerPool(int threads, std::chrono::microseconds spin) : spin_(spin) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { Work(i); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void WorkerPool::Run(const std::function<void(int)>& fn) {
  if (workers_.empty()) return fn(0);
  std::lock_guard<std::mutex> run(run_mutex_);
  job_ = &fn;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Under the sleepers' mutex, so that a worker deciding to sleep cannot miss the bump.
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  auto wait_for_workers = [this] {
    // Spin (the workers' shares are usually microseconds from done), yielding now and then in
    // case a worker is waiting for this very core.
    for (uint32_t polls = 1; pending_.load(std::memory_order_acquire) != 0; ++polls) {
      SpinPause();
      if (polls % 64 == 0) std::this_thread::yield();
    }
  };
  try {
    fn(0);
  } catch (...) {
    wait_for_workers();  // they still read fn
    worker_error_ = nullptr;
    throw;
  }
  wait_for_workers();
  // The workers are done (pending_ read with acquire): their writes here are visible.
  if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
}

void WorkerPool::Work(int index) {
  uint64_t seen = 0;
  while (true) {
    const auto spin_until = std::chrono::steady_clock::now() + spin_;
    uint64_t now = generation_.load(std::memory_order_acquire);
    // The clock is read every 256 polls: reading it costs more than a poll.
    for (uint32_t polls = 1; now == seen && !stopping_.load(std::memory_order_relaxed); ++polls) {
      if (polls % 256 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
      SpinPause();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleeps_.fetch_add(1);
      wake_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
      if (stopping_) return;
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    try {
      (*job_)(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!worker_error_) worker_error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ParallelRanges(WorkerPool& pool, int64_t count, int64_t alignment,
                    const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (count <= 0) return;
  const int64_t threads = pool.threads();
  const int64_t units = (count + alignment - 1) / alignment;
  if (threads == 1 || units == 1) return fn(0, count);
  const int64_t per_thread = (units + threads - 1) / threads;
  const int64_t chunk = (per_thread + kChunksPerThread - 1) / kChunksPerThread * alignment;
  std::atomic<int64_t> next{0};
  pool.Run([&](int) {
    for (int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed); begin < count;
         begin = next.fetch_add(chunk, std::memory_order_relaxed)) {
      fn(begin, std::min(count, begin + chunk));
    }
  });
}

}  // namespace txscore::llm::cpu
