#include "pipelines/claims_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/json_forms.h"
#include "common/pan_scan.h"

namespace txscore::pipelines {

namespace {

constexpr std::pair<ClaimsJobState, const char*> kStateNames[] = {
    {ClaimsJobState::kQueued, "queued"},           {ClaimsJobState::kRunning, "running"},
    {ClaimsJobState::kInterrupted, "interrupted"}, {ClaimsJobState::kCancelled, "cancelled"},
    {ClaimsJobState::kFailed, "failed"},           {ClaimsJobState::kDone, "done"},
};

}  // namespace

const char* ClaimsJobStateName(ClaimsJobState state) {
  for (const auto& [s, name] : kStateNames) {
    if (s == state) return name;
  }
  return "unknown";
}

std::optional<ClaimsJobState> ParseClaimsJobState(std::string_view name) {
  for (const auto& [s, n] : kStateNames) {
    if (name == n) return s;
  }
  return std::nullopt;
}
namespace {

using json = nlohmann::ordered_json;

}  // namespace

std::string OutcomeLine(int64_t line, const ClaimOutcome& o) {
  json doc = {{"line", line},
              {"claim_id", o.claim_id},
              {"score", o.score},
              {"decision", DecisionName(o.decision)},
              {"reasons", ReasonsToJson<json>(o.reasons)}};
  doc["rule_hits"] = RuleHitsToJson<json>(
      o.rule_hits, [](const RuleHit& hit) { return hit.decision ? DecisionName(*hit.decision) : nullptr; });
  doc["findings"] = o.findings ? FindingsToJson<json>(*o.findings) : json(nullptr);
  json scores = json::object(), devices = json::object(), timings = json::object();
  for (const auto& [stage, score] : o.stage_scores) scores[stage] = score;
  for (const auto& [stage, device] : o.devices) devices[stage] = device;
  for (const StageTiming& t : o.timings) timings[t.stage] = t.elapsed_us;
  doc["stage_scores"] = scores;
  doc["devices"] = devices;
  json shortfalls = json::array();
  for (const LlmShortfall& s : o.llm_shortfalls) {
    shortfalls.push_back({{"stage", s.stage}, {"reason", OutcomeName(s.reason)}, {"detail", s.detail}});
  }
  doc["llm_shortfalls"] = shortfalls;
  doc["timings"] = timings;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string ErrorLine(int64_t line, const Error& error) {
  // Messages may quote a row's own values: card numbers in them are redacted, as in free text.
  json doc = {{"line", line}, {"error", RedactPans(error.message)}};
  if (!error.field.empty()) doc["field"] = error.field;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Status WriteSummaryFile(const std::string& output_path, const ClaimsJobSummary& summary) {
  const std::string path = output_path + ".summary.json";
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << summary.ToJson() << "\n";
    if (!out) return Internal("cannot write " + path);
  }
  std::error_code ec;
  std::filesystem::rename(path + ".tmp", path, ec);
  if (ec) return Internal("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

int64_t ClaimsJobSummary::llm_shortfall_total() const {
  int64_t total = 0;
  for (const auto& [reason, claims] : llm_shortfalls) total += claims;
  return total;
}

double ClaimsJobSummary::LlmShortfallShare() const {
  return llm_selected > 0 ? static_cast<double>(llm_shortfall_total()) / static_cast<double>(llm_selected) : 0;
}

std::string ClaimsJobSummary::ToJson() const {
  json flags_by_count = json::array();
  std::vector<std::pair<std::string, int64_t>> sorted(flags.begin(), flags.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [flag, count] : sorted) flags_by_count.push_back({{"flag", flag}, {"claims", count}});
  json stages = json::object();
  for (const auto& [stage, us] : stage_us) {
    auto device = devices.find(stage);
    stages[stage] = {{"seconds", static_cast<double>(us) / 1e6},
                     {"device", device != devices.end() ? json(device->second) : json(nullptr)}};
  }
  json doc = {{"job_id", job_id},
              {"state", ClaimsJobStateName(state)},
              {"total", total},
              {"done", done},
              {"errors", errors},
              {"llm_selected", llm_selected},
              {"analysed", analysed},
              {"llm_shortfalls", llm_shortfalls},
              {"decisions", decisions},
              {"flags", flags_by_count},
              {"stages", stages},
              {"elapsed_s", elapsed_s},
              {"claims_per_s", claims_per_s()},
              {"runs", runs},
              {"pipeline_digests", pipeline_digests},
              {"input", RedactPans(input)},  // a file named after a card number is no reason to keep one
              {"input_sha256", input_sha256}};
  if (!shard.empty()) doc["shard"] = shard;
  return doc.dump(2);
}

std::string ClaimsJobSummary::ToText() const {
  char line[256];
  std::string text;
  std::snprintf(line, sizeof line, "job %s %s: %lld of %lld rows, %lld errors, %.1f claims/s over %.1f s (%d run%s)\n",
                job_id.c_str(), ClaimsJobStateName(state), static_cast<long long>(done), static_cast<long long>(total),
                static_cast<long long>(errors), claims_per_s(), elapsed_s, runs, runs == 1 ? "" : "s");
  text += line;
  text += "decisions:";
  for (const auto& [decision, count] : decisions) text += " " + decision + " " + std::to_string(count);
  text += "\nLLM findings for " + std::to_string(analysed) + " of " + std::to_string(llm_selected) +
          " claims it was asked to read";
  if (llm_shortfall_total() > 0) {
    text += " (no findings:";
    for (const auto& [reason, claims] : llm_shortfalls) text += " " + reason + " " + std::to_string(claims);
    text += "; see \"llm_shortfalls\" in the output)";
  }
  text += "; most frequent flags:";
  std::vector<std::pair<std::string, int64_t>> sorted(flags.begin(), flags.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < sorted.size() && i < 5; ++i)
    text += " " + sorted[i].first + " " + std::to_string(sorted[i].second);
  text += "\ntime per stage:";
  for (const auto& [stage, us] : stage_us) {
    auto device = devices.find(stage);
    std::snprintf(line, sizeof line, " %s %.2f s%s%s;", stage.c_str(), static_cast<double>(us) / 1e6,
                  device != devices.end() ? " on " : "", device != devices.end() ? device->second.c_str() : "");
    text += line;
  }
  text += "\n";
  if (!pipeline_digests.empty()) {
    text += "pipeline files: ";
    for (size_t i = 0; i < pipeline_digests.size(); ++i) text += (i > 0 ? ", then " : "") + pipeline_digests[i];
    text += "\n";
  }
  return text;
}

}  // namespace txscore::pipelines
