#include "service/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace txscore::service {
namespace {

// The fields of /proc/self/stat after the command name (which may hold spaces and
// parentheses, so the line is split after its last ')'). Field 3 (state) is index 0.
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;
}

// The system's boot time (seconds since the epoch), from /proc/stat's btime line.
double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return 0;
}

}  // namespace

ProcessSample SampleProcess() {
  ProcessSample sample;
  const std::vector<std::string> stat = StatFields();
  // Indices from field 3: utime 14, stime 15, starttime 22, vsize 23, rss 24 (proc(5)).
  if (stat.size() < 22) return sample;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  sample.cpu_seconds = (std::stod(stat[11]) + std::stod(stat[12])) / ticks;
  sample.start_time_seconds = BootTimeSeconds() + std::stod(stat[19]) / ticks;
  sample.virtual_bytes = std::stod(stat[20]);
  sample.resident_bytes = std::stod(stat[21]) * page;
  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++fds;
  sample.open_fds = fds > 0 ? fds - 1 : 0;  // less the descriptor that listed the directory
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) sample.max_fds = static_cast<double>(limit.rlim_cur);
  sample.ok = true;
  return sample;
}

void AddProcessMetrics(MetricsRegistry* registry) {
  if (!SampleProcess().ok) return;
  registry->AddFloatCounterFunction("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", {},
                                    [] { return SampleProcess().cpu_seconds; });
  const struct {
    const char* name;
    const char* help;
    double ProcessSample::*field;
  } kGauges[] = {
      {"process_resident_memory_bytes", "Resident memory size in bytes.", &ProcessSample::resident_bytes},
      {"process_virtual_memory_bytes", "Virtual memory size in bytes.", &ProcessSample::virtual_bytes},
      {"process_open_fds", "Number of open file descriptors.", &ProcessSample::open_fds},
      {"process_max_fds", "Maximum number of open file descriptors.", &ProcessSample::max_fds},
      {"process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
       &ProcessSample::start_time_seconds},
  };
  for (const auto& g : kGauges) {
    registry->AddGaugeFunction(g.name, g.help, {}, [field = g.field] { return SampleProcess().*field; });
  }
}

}  // namespace txscore::service
