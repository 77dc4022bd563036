#include "llm/claim_analysis.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "llm/utf8.h"

namespace txscore::llm {
namespace {

constexpr size_t kMaxSummaryCharacters = 400;

void Append(std::vector<int32_t>* ids, const std::vector<int32_t>& more) { ids->insert(ids->end(), more.begin(), more.end()); }

}  // namespace

const std::vector<std::string>& ClaimAnalysisTask::Flags() {
  static const std::vector<std::string> flags = {"inconsistent_dates", "amount_mismatch",    "prior_claims_pattern",
                                                 "vague_description",  "pressure_to_settle", "provider_anomaly",
                                                 "none"};
  return flags;
}

const std::string& ClaimAnalysisTask::Schema() {
  static const std::string schema = [] {
    nlohmann::ordered_json s = {
        {"type", "object"},
        {"properties",
         {{"risk_level", {{"type", "string"}, {"enum", {"low", "medium", "high"}}}},
          {"flags", {{"type", "array"}, {"items", {{"type", "string"}, {"enum", Flags()}}}, {"minItems", 1}, {"maxItems", 7}}},
          {"summary", {{"type", "string"}, {"maxLength", kMaxSummaryCharacters}}}}},
        {"required", {"risk_level", "flags", "summary"}}};
    return s.dump();
  }();
  return schema;
}

std::vector<int32_t> ClaimAnalysisTask::PromptIds(const Tokenizer& tokenizer, const ClaimFields& claim) {
  const std::string instructions =
      "You are an insurance claims fraud analyst. Read the claim and answer with JSON only: "
      "{\"risk_level\": \"low\"|\"medium\"|\"high\", \"flags\": [...], \"summary\": \"...\"}. Flags: "
      "inconsistent_dates, amount_mismatch, prior_claims_pattern, vague_description, pressure_to_settle, "
      "provider_anomaly, none.";
  const std::string fields = "Claim " + claim.claim_id + " on policy " + claim.policy_id + "\nType: " +
                             claim.claim_type + "\nIncident date: " + claim.incident_date +
                             "\nReport date: " + claim.report_date + "\nAmount claimed: " + claim.amount_claimed +
                             "\nPolicy limit: " + claim.policy_limit +
                             "\nPrior claims: " + std::to_string(claim.prior_claims) +
                             "\nProvider: " + claim.provider_id + "\nNarrative: " + claim.narrative +
                             "\nAdjuster notes: " + claim.adjuster_notes;
  EncodeOptions template_text;  // our own markers: special tokens on
  EncodeOptions user_text;
  user_text.parse_special = false;
  std::vector<int32_t> ids;
  const bool chatml = tokenizer.TokenId("<|im_start|>").has_value() && tokenizer.TokenId("<|im_end|>").has_value();
  if (chatml) {
    Append(&ids, tokenizer.Encode("<|im_start|>system\n" + instructions + "<|im_end|>\n<|im_start|>user\n", template_text));
    Append(&ids, tokenizer.Encode(fields, user_text));
    Append(&ids, tokenizer.Encode("<|im_end|>\n<|im_start|>assistant\n", template_text));
  } else {
    Append(&ids, tokenizer.Encode(instructions + "\n\n", user_text));
    Append(&ids, tokenizer.Encode(fields, user_text));
    Append(&ids, tokenizer.Encode("\n\nJSON:", user_text));
  }
  return ids;
}

Result<Findings> ClaimAnalysisTask::ParseFindings(const std::string& json_text) {
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("findings are not a JSON object", "findings");
  Findings f;
  const auto risk = doc.find("risk_level");
  if (risk == doc.end() || !risk->is_string() ||
      (*risk != "low" && *risk != "medium" && *risk != "high")) {
    return InvalidArgument("risk_level must be low, medium or high", "risk_level");
  }
  f.risk_level = risk->get<std::string>();
  const auto flags = doc.find("flags");
  if (flags == doc.end() || !flags->is_array() || flags->empty()) {
    return InvalidArgument("flags must be a non-empty list", "flags");
  }
  for (const auto& flag : *flags) {
    if (!flag.is_string() || std::find(Flags().begin(), Flags().end(), flag.get<std::string>()) == Flags().end()) {
      return InvalidArgument("unknown flag " + flag.dump(), "flags");
    }
    // Repeats add nothing: keep each flag once, in first-seen order.
    if (std::find(f.flags.begin(), f.flags.end(), flag.get<std::string>()) == f.flags.end()) {
      f.flags.push_back(flag.get<std::string>());
    }
  }
  const auto summary = doc.find("summary");
  if (summary == doc.end() || !summary->is_string() || Utf8Length(summary->get<std::string>()) > kMaxSummaryCharacters) {
    return InvalidArgument("summary must be a string of at most 400 characters", "summary");
  }
  f.summary = summary->get<std::string>();
  return f;
}

Result<Findings> ClaimAnalysisTask::Analyze(Generator& generator, const Tokenizer& tokenizer, const ClaimFields& claim,
                                            GenerationOptions options, const std::string& model_id) {
  options.schema = Schema();
  Result<GenerationResult> result = generator.Generate(PromptIds(tokenizer, claim), options);
  if (!result.ok()) return result.error();
  Result<Findings> findings = ParseFindings(result->text);
  if (!findings.ok()) return Internal("the constrained output did not parse: " + findings.error().ToString());
  findings->model_id = model_id;
  return findings;
}

}  // namespace txscore::llm
