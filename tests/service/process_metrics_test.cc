// The process_* metrics (service/process_metrics.h) against what the kernel says by other
// means: getrlimit, getrusage, a descriptor opened and a block of memory touched meanwhile.
#include "service/process_metrics.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace txscore::service {
namespace {

double RusageCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

TEST(ProcessMetrics, EachReadingAgreesWithTheKernelsOtherAccounts) {
  const ProcessSample before = SampleProcess();
  ASSERT_TRUE(before.ok);

  // One more descriptor open is one more counted.
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(SampleProcess().open_fds, before.open_fds + 1);
  ::close(fd);
  EXPECT_EQ(SampleProcess().open_fds, before.open_fds);
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(before.max_fds, static_cast<double>(limit.rlim_cur));

  // 64 MiB mapped and touched: that much more resident, and at least as much virtual.
  const size_t block = 64 << 20;
  void* memory = ::mmap(nullptr, block, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  std::memset(memory, 1, block);
  const ProcessSample touched = SampleProcess();
  EXPECT_GE(touched.resident_bytes - before.resident_bytes, 0.95 * block);
  EXPECT_GE(touched.virtual_bytes - before.virtual_bytes, static_cast<double>(block));
  EXPECT_GE(touched.virtual_bytes, touched.resident_bytes);
  ::munmap(memory, block);

  // CPU time: work until the process has used 0.2 s more, then both accounts agree to within
  // a few clock ticks.
  const double start = SampleProcess().cpu_seconds;
  volatile uint64_t spin = 0;
  while (SampleProcess().cpu_seconds < start + 0.2) {
    for (int i = 0; i < 1000000; ++i) spin = spin + static_cast<uint64_t>(i);
  }
  EXPECT_NEAR(SampleProcess().cpu_seconds, RusageCpuSeconds(), 0.05);

  // Started before now, and not long ago (this test binary started it).
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(before.start_time_seconds, now + 1);
  EXPECT_GT(before.start_time_seconds, now - 3600);
}

}  // namespace
}  // namespace txscore::service
