#include "llm/claim_analysis.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/pan_scan.h"
#include "llm/chat_template.h"
#include "llm/utf8.h"

namespace txscore::llm {
namespace {

constexpr size_t kMaxSummaryCharacters = 400;

void Append(std::vector<int32_t>* ids, const std::vector<int32_t>& more) {
  ids->insert(ids->end(), more.begin(), more.end());
}

}  // namespace

const std::vector<std::string>& ClaimAnalysisTask::Flags() {
  static const std::vector<std::string> flags = {"inconsistent_dates",
                                                 "amount_mismatch",
                                                 "prior_claims_pattern",
                                                 "vague_description",
                                                 "pressure_to_settle",
                                                 "provider_anomaly",
                                                 "none"};
  return flags;
}

const std::string& ClaimAnalysisTask::Schema() {
  static const std::string schema = [] {
    nlohmann::ordered_json s = {
        {"type", "object"},
        {"properties",
         {{"risk_level", {{"type", "string"}, {"enum", {"low", "medium", "high"}}}},
          {"flags",
           {{"type", "array"}, {"items", {{"type", "string"}, {"enum", Flags()}}}, {"minItems", 1}, {"maxItems", 7}}},
          {"summary", {{"type", "string"}, {"maxLength", kMaxSummaryCharacters}}}}},
        {"required", {"risk_level", "flags", "summary"}}};
    return s.dump();
  }();
  return schema;
}

namespace {

// The prompt around a case's fields. It starts with the tokenizer's special prefix, once: the
// BOS that Llama 3 and Gemma saw first in every training text (Qwen3's tokenizer adds none, and
// config.json's bos_token_id is no reason to invent one). The segments after it are encoded
// without add_special_tokens, and the first is our own text, which never spells a BOS. The
// instructions use the checkpoint's chat markers when its tokenizer has them (ChatML); the
// case's own text is encoded with special tokens disabled, so a narrative or merchant name
// cannot forge control tokens (a BOS among them).
// The prompt: with the checkpoint's chat template when it has one (a system turn with the
// instructions, a user turn with the case, the generation prompt; Qwen3's thinking off, as the
// answer is constrained JSON), else ChatML markers when the tokenizer has them, else plain text.
// The case's own text cannot forge control tokens: encoded with special tokens off, or, inside
// a rendered template, with each special token's text broken (DefuseSpecialTokens).
Result<std::vector<int32_t>> ForensicPromptIds(const Tokenizer& tokenizer, const std::string& instructions,
                                               const std::string& fields) {
  if (tokenizer.chat_template() != nullptr) {
    ChatTemplateOptions options;
    options.extra = {{"enable_thinking", false}};
    const jinja::Json messages = {{{"role", "system"}, {"content", instructions}},
                                  {{"role", "user"}, {"content", DefuseSpecialTokens(tokenizer, fields)}}};
    return ApplyChatTemplate(tokenizer, messages, options);
  }
  EncodeOptions template_text;  // our own markers: special tokens on
  EncodeOptions user_text;
  user_text.parse_special = false;
  std::vector<int32_t> ids = tokenizer.SpecialPrefix();
  const bool chatml = tokenizer.TokenId("<|im_start|>").has_value() && tokenizer.TokenId("<|im_end|>").has_value();
  if (chatml) {
    Append(&ids,
           tokenizer.Encode("<|im_start|>system\n" + instructions + "<|im_end|>\n<|im_start|>user\n", template_text));
    Append(&ids, tokenizer.Encode(fields, user_text));
    Append(&ids, tokenizer.Encode("<|im_end|>\n<|im_start|>assistant\n", template_text));
  } else {
    Append(&ids, tokenizer.Encode(instructions + "\n\n", user_text));
    Append(&ids, tokenizer.Encode(fields, user_text));
    Append(&ids, tokenizer.Encode("\n\nJSON:", user_text));
  }
  return ids;
}

const char kAnswerFormat[] =
    "Answer with JSON only: {\"risk_level\": \"low\"|\"medium\"|\"high\", \"flags\": [...], \"summary\": \"...\"}. "
    "Flags: inconsistent_dates, amount_mismatch, prior_claims_pattern, vague_description, pressure_to_settle, "
    "provider_anomaly, none.";

// Generates under the findings schema and parses the result.
Result<Findings> GenerateFindings(Generator& generator, const Result<std::vector<int32_t>>& prompt,
                                  GenerationOptions options, const std::string& model_id) {
  if (!prompt.ok()) return prompt.error();
  options.schema = ClaimAnalysisTask::Schema();
  Result<GenerationResult> result = generator.Generate(*prompt, options);
  if (!result.ok()) return result.error();
  return ClaimAnalysisTask::FindingsFrom(*result, model_id);
}

}  // namespace

TaskMessages ClaimAnalysisTask::Messages(const ClaimFields& claim) {
  return {std::string("You are an insurance claims fraud analyst. Read the claim. ") + kAnswerFormat,
          "Claim " + claim.claim_id + " on policy " + claim.policy_id + "\nType: " + claim.claim_type +
              "\nIncident date: " + claim.incident_date + "\nReport date: " + claim.report_date +
              "\nAmount claimed: " + claim.amount_claimed + "\nPolicy limit: " + claim.policy_limit +
              "\nPrior claims: " + std::to_string(claim.prior_claims) + "\nProvider: " + claim.provider_id +
              "\nNarrative: " + claim.narrative + "\nAdjuster notes: " + claim.adjuster_notes};
}

Result<std::vector<int32_t>> ClaimAnalysisTask::PromptIds(const Tokenizer& tokenizer, const ClaimFields& claim) {
  const TaskMessages messages = Messages(claim);
  return ForensicPromptIds(tokenizer, messages.system, messages.user);
}

TaskMessages TransactionReviewTask::Messages(const TransactionCase& tx) {
  std::string fields = "Transaction " + tx.request_id + " at " + tx.time_utc + "\nAmount: " + tx.amount +
                       "\nMerchant: " + tx.merchant_id + " (MCC " + tx.mcc + ", " + tx.merchant_country + ")" +
                       "\nCard country: " + tx.card_country + "\nChannel: " + tx.channel +
                       "\nEntry mode: " + tx.entry_mode;
  char score[32];
  std::snprintf(score, sizeof score, "%.3f", tx.score);
  fields += std::string("\nFraud score: ") + score + "\nReasons:";
  for (const std::string& reason : tx.reasons) fields += "\n- " + reason;
  return {std::string("You are a card fraud analyst. A scoring model sent this transaction to manual review. Read "
                      "it. ") +
              kAnswerFormat,
          fields};
}

Result<std::vector<int32_t>> TransactionReviewTask::PromptIds(const Tokenizer& tokenizer, const TransactionCase& tx) {
  const TaskMessages messages = Messages(tx);
  return ForensicPromptIds(tokenizer, messages.system, messages.user);
}

Result<Findings> TransactionReviewTask::Analyze(Generator& generator, const Tokenizer& tokenizer,
                                                const TransactionCase& tx, GenerationOptions options,
                                                const std::string& model_id) {
  return GenerateFindings(generator, PromptIds(tokenizer, tx), std::move(options), model_id);
}

const char* RiskLevelName(RiskLevel level) {
  switch (level) {
    case RiskLevel::kLow:
      return "low";
    case RiskLevel::kMedium:
      return "medium";
    case RiskLevel::kHigh:
      return "high";
  }
  return "unknown";
}

Result<Findings> ClaimAnalysisTask::ParseFindings(const std::string& json_text) {
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("findings are not a JSON object", "findings");
  Findings f;
  const auto risk = doc.find("risk_level");
  std::optional<RiskLevel> level;
  if (risk != doc.end() && risk->is_string()) {
    for (RiskLevel candidate : {RiskLevel::kLow, RiskLevel::kMedium, RiskLevel::kHigh}) {
      if (*risk == RiskLevelName(candidate)) level = candidate;
    }
  }
  if (!level) return InvalidArgument("risk_level must be low, medium or high", "risk_level");
  f.risk_level = *level;
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
  if (summary == doc.end() || !summary->is_string() ||
      Utf8Length(summary->get<std::string>()) > kMaxSummaryCharacters) {
    return InvalidArgument("summary must be a string of at most 400 characters", "summary");
  }
  // The model writes what it read, and a claim's text may have held a card number in a form the
  // claim's own redaction did not see (or the model may make one up): the summary goes to the
  // audit trail, job outputs and callers, so card numbers in it are redacted here, once.
  f.summary = RedactPans(summary->get<std::string>());
  return f;
}

Result<Findings> ClaimAnalysisTask::FindingsFrom(const GenerationResult& generated, const std::string& model_id) {
  if (generated.finish_reason == FinishReason::kDeadline) {
    return DeadlineExceeded("the deadline cut the findings short after " +
                            std::to_string(generated.generated_ids.size()) + " tokens");
  }
  Result<Findings> findings = ParseFindings(generated.text);
  if (!findings.ok()) return Internal("the constrained output did not parse: " + findings.error().ToString());
  findings->model_id = model_id;
  return findings;
}

Result<Findings> ClaimAnalysisTask::Analyze(Generator& generator, const Tokenizer& tokenizer, const ClaimFields& claim,
                                            GenerationOptions options, const std::string& model_id) {
  return GenerateFindings(generator, PromptIds(tokenizer, claim), std::move(options), model_id);
}

}  // namespace txscore::llm
