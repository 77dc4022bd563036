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
    std::vector<std::string> reasons;  // the top reason codes' features, in order
    std::string pipeline_version;
  };
  static constexpr size_t kDefaultCapacity = 50;
  explicit RecentDecisions(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  void Add(const pipelines::ScoreOutcome& outcome, int64_t time_ms);
  std::vector<Entry> Newest() const;  // newest first, at most capacity

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;  // oldest first
};

}  // namespace txscore::service
