// A progress display for long commands: a bar on a terminal, a line every 10 % otherwise;
// with a unit, also the rate (units per second since `start_done`) and the time left.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace txscore::service {

class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::string what, std::string unit = "")
      : what_(std::move(what)), unit_(std::move(unit)), tty_(isatty(STDERR_FILENO) != 0) {}

  // `start_done`: what was already done when this run began (a resumed job), left out of the rate.
  // `note`: appended to the line (", 3 failed").
  void Update(long done, long total, long start_done = 0, const std::string& note = "") {
    const int percent = total > 0 ? static_cast<int>(100 * done / total) : 100;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const long this_run = done - start_done;
    const double eta = this_run > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(this_run) : 0;
    std::string rate;
    if (!unit_.empty() && elapsed > 0)
      rate = ", " + std::to_string(static_cast<long>(this_run / elapsed)) + " " + unit_ + "/s";
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = percent * kWidth / 100;
      std::fprintf(stderr, "\r%s [%s%s] %ld/%ld %3d%%%s eta %.0fs%s ", what_.c_str(), std::string(filled, '=').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), done, total, percent, rate.c_str(), eta, note.c_str());
      if (done == total) std::fprintf(stderr, "\n");
    } else if (percent / 10 != last_decile_ || done == total) {
      last_decile_ = percent / 10;
      std::fprintf(stderr, "%s: %ld/%ld (%d%%)%s, %.1fs elapsed, eta %.0fs%s\n", what_.c_str(), done, total, percent,
                   rate.c_str(), elapsed, eta, note.c_str());
    }
  }

 private:
  std::string what_;
  std::string unit_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace txscore::service
