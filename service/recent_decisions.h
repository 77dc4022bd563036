// The last decisions the scoring service made, for the dashboard (service/dashboard.h).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "pipelines/scoring_pipeline.h"

namespace txscore::service {

// The last decisions the service made, newest first, for the dashboard. What an entry keeps is
// what an audit record already keeps about a card: its token, never its number. Thread-safe; a
// request pays one short lock.
class RecentDecisions {
 public:
  struct Entry {
    int64_t time_ms = 0;
    std::string request_id;
    std::string card_token;
    double score = 0;
    std::string decision;
    std::vector<std::string> reasons;    // the top reason codes' features, in order
    std::vector<std::string> rule_hits;  // the rules that matched, e.g. "R20"
    // From an llm_findings stage, when it wrote some: the risk level and flags ("high:
    // velocity_anomaly, new_device"), and the summary, card numbers redacted.
    std::string findings;
    std::string findings_summary;
    std::string pipeline_version;
  };
  // Enough for an operator to find the REVIEWs and DECLINEs among a busy minute's APPROVEs.
  static constexpr size_t kDefaultCapacity = 200;
  explicit RecentDecisions(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  void Add(const pipelines::ScoreOutcome& outcome, int64_t time_ms);
  std::vector<Entry> Newest() const;  // newest first, at most capacity

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;  // oldest first
};

}  // namespace txscore::service
