#include "service/recent_decisions.h"

#include <utility>

#include "common/pan_scan.h"

namespace txscore::service {

void RecentDecisions::Add(const pipelines::ScoreOutcome& outcome, int64_t time_ms) {
  Entry entry;
  entry.time_ms = time_ms;
  entry.request_id = outcome.request_id;
  entry.card_token = outcome.card_token;
  entry.score = outcome.score;
  entry.decision = pipelines::DecisionName(outcome.decision);
  for (const pipelines::Reason& reason : outcome.reasons) entry.reasons.push_back(reason.feature);
  for (const pipelines::RuleHit& hit : outcome.rule_hits) entry.rule_hits.push_back(hit.rule);
  if (outcome.findings) {
    entry.findings = llm::RiskLevelName(outcome.findings->risk_level);
    for (size_t i = 0; i < outcome.findings->flags.size(); ++i)
      entry.findings += (i == 0 ? ": " : ", ") + outcome.findings->flags[i];
    entry.findings_summary = RedactPans(outcome.findings->summary);
  }
  entry.pipeline_version = outcome.pipeline_version;
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(std::move(entry));
  if (entries_.size() > capacity_) entries_.pop_front();
}

std::vector<RecentDecisions::Entry> RecentDecisions::Newest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {entries_.rbegin(), entries_.rend()};
}

}  // namespace txscore::service
