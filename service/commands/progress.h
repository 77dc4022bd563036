// A progress display for long commands: a bar on a terminal, a line every 10 % otherwise.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace txscore::service {

class ProgressDisplay {
 public:
  explicit ProgressDisplay(std::string what) : what_(std::move(what)), tty_(isatty(STDERR_FILENO) != 0) {}

  void Update(long done, long total) {
    const int percent = total > 0 ? static_cast<int>(100 * done / total) : 100;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = percent * kWidth / 100;
      std::fprintf(stderr, "\r%s [%s%s] %ld/%ld %3d%% eta %.0fs ", what_.c_str(), std::string(filled, '=').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), done, total, percent, eta);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (percent / 10 != last_decile_ || done == total) {
      last_decile_ = percent / 10;
      std::fprintf(stderr, "%s: %ld/%ld (%d%%), %.1fs elapsed\n", what_.c_str(), done, total, percent, elapsed);
    }
  }

 private:
  std::string what_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace txscore::service
