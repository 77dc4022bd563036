// The process_* metrics every Prometheus client library exports (the names and meanings of
// client_golang's process collector), so that dashboards and alerts written for any service
// read txscore's: CPU seconds, resident and virtual memory, open and allowed file
// descriptors, start time. Read from /proc at each scrape (Linux; elsewhere none are added).
#pragma once

#include "service/metrics.h"

namespace txscore::service {

void AddProcessMetrics(MetricsRegistry* registry);

// One reading, for tests and for the registration above. ok is false when /proc could not be
// read (not Linux, or /proc not mounted).
struct ProcessSample {
  bool ok = false;
  double cpu_seconds = 0;         // user + system
  double resident_bytes = 0;      // RSS
  double virtual_bytes = 0;       // VSZ
  double open_fds = 0;            // entries of /proc/self/fd
  double max_fds = 0;             // RLIMIT_NOFILE's soft limit
  double start_time_seconds = 0;  // since the Unix epoch
};
ProcessSample SampleProcess();

}  // namespace txscore::service
