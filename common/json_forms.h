// The JSON forms of a decision's findings, reasons and rule hits that more than one JSON writer
// uses: the audit record (storage/audit_log.cc), a claims job's output lines
// (pipelines/claims_output.cc) and `txscore score`'s output (service/transaction_json.cc).
// One function per shape, so that the writers cannot drift apart.
//
// Each is a template over the source type: every layer keeps its own struct with the same
// field names (llm::Findings, storage::AuditFindings, rpc::Findings; pipelines::Reason,
// storage::AuditReason, rpc::ReasonCode), since storage depends on neither llm nor Thrift.
// `Json` is nlohmann::json (keys sorted when written) or nlohmann::ordered_json (keys in the
// order shown). Pure functions: safe from any thread.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace txscore {

// The text of a risk level kept as text (storage and Thrift do); llm::RiskLevel's overload
// sits beside that enum and is found by argument-dependent lookup.
inline const std::string& RiskLevelText(const std::string& level) { return level; }

// {"risk_level": "high", "flags": ["amount_mismatch"], "summary": "...", "model_id": "..."}
template <class Json, class FindingsLike>
Json FindingsToJson(const FindingsLike& findings) {
  return Json{{"risk_level", RiskLevelText(findings.risk_level)},
              {"flags", findings.flags},
              {"summary", findings.summary},
              {"model_id", findings.model_id}};
}

enum class ContributionDigits {
  kAll,   // as computed (stored and machine-read forms)
  kFour,  // rounded to 4 decimal places (what a person reads: the CLI)
};

// [{"feature": "amount_zscore", "contribution": 2.3, "value": 6.1 or null when missing (NaN)}]
template <class Json, class ReasonList>
Json ReasonsToJson(const ReasonList& reasons, ContributionDigits digits = ContributionDigits::kAll) {
  Json out = Json::array();
  for (const auto& r : reasons) {
    const double contribution =
        digits == ContributionDigits::kFour ? std::round(r.contribution * 1e4) / 1e4 : r.contribution;
    out.push_back({{"feature", r.feature},
                   {"contribution", contribution},
                   {"value", std::isnan(r.value) ? Json(nullptr) : Json(r.value)}});
  }
  return out;
}

// [{"rule": "R17", "decision": "DECLINE" or null when the rule only reports}]. `decision_of(hit)`
// gives the name of the decision a hit forces, nullptr for none.
template <class Json, class RuleHitList, class DecisionOf>
Json RuleHitsToJson(const RuleHitList& hits, DecisionOf decision_of) {
  Json out = Json::array();
  for (const auto& hit : hits) {
    const char* decision = decision_of(hit);
    out.push_back({{"rule", hit.rule}, {"decision", decision != nullptr ? Json(decision) : Json()}});
  }
  return out;
}

}  // namespace txscore
