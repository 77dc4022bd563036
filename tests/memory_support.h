// What a test reads of this process's memory (/proc/self/status), and bounds on its growth
// that hold only outside AddressSanitizer. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstddef>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace txscore::testing {

// This process's resident memory now (VmRSS), and the most it has held since the last
// ResetPeakResidentBytes (VmHWM): a request that allocated gigabytes for a moment shows in
// the peak even after it was freed.
inline size_t StatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1)) * 1024;
  }
  ADD_FAILURE() << "no " << field << " in /proc/self/status";
  return 0;
}
inline size_t ResidentBytes() { return StatusBytes("VmRSS"); }
inline size_t PeakResidentBytes() { return StatusBytes("VmHWM"); }
inline void ResetPeakResidentBytes() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";  // resets VmHWM to the current VmRSS (proc(5))
}
// Fails the test when this process's peak resident memory grew `bytes` or more beyond
// `peak_before`. Under AddressSanitizer freed memory waits in quarantine and every block has
// redzones, so the peak says nothing about what the code holds: checked in the ordinary build
// only (scripts/asan.sh runs the rest of the test).
inline void ExpectPeakGrowthBelow(size_t peak_before, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  (void)peak_before, (void)bytes;
#else
  EXPECT_LT(PeakResidentBytes(), peak_before + bytes) << "peak resident memory grew too much";
#endif
}
// The same for the resident memory now against `resident_before` (ResidentBytes()).
inline void ExpectResidentGrowthBelow(size_t resident_before, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  (void)resident_before, (void)bytes;
#else
  EXPECT_LT(ResidentBytes(), resident_before + bytes) << "resident memory grew too much";
#endif
}

// A thread that lives across the loads it is given, as the admin port's threads that run
// reloads do: each keeps its own malloc heap.
class LongLivedThread {
 public:
  LongLivedThread() : thread_([this] { Serve(); }) {}
  ~LongLivedThread() {
    Run(nullptr);
    thread_.join();
  }
  // Runs `work` on this thread and returns when it is done; null ends the thread.
  void Run(std::function<void()> work) {
    std::unique_lock<std::mutex> lock(mu_);
    work_ = std::move(work);
    pending_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return !pending_; });
  }

 private:
  void Serve() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return pending_; });
      std::function<void()> work = std::move(work_);
      if (work) work();
      pending_ = false;
      changed_.notify_all();
      if (!work) return;
    }
  }
  std::mutex mu_;
  std::condition_variable changed_;
  std::function<void()> work_;
  bool pending_ = false;
  std::thread thread_;
};

}  // namespace txscore::testing
