// The claim-analysis task: a prompt built from a claim's fields and narrative, an output
// schema the generator enforces, and the parse of the model's JSON into Findings.
//
// With the random-weight demo checkpoints the findings are well-formed but meaningless; point
// the model directory at a real instruction-tuned checkpoint for real analysis.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "llm/generator.h"
#include "llm/tokenizer.h"

namespace txscore::llm {

struct ClaimFields {
  std::string claim_id;
  std::string policy_id;
  std::string claim_type;
  std::string incident_date;  // ISO 8601 date
  std::string report_date;
  std::string amount_claimed;  // with currency, e.g. "4200.50 EUR"
  std::string policy_limit;
  int prior_claims = 0;
  std::string provider_id;
  std::string narrative;
  std::string adjuster_notes;
};

enum class RiskLevel { kLow, kMedium, kHigh };
const char* RiskLevelName(RiskLevel level);  // "low", "medium", "high"
// The name JSON writers show (common/json_forms.h finds it by argument-dependent lookup).
inline const char* RiskLevelText(RiskLevel level) { return RiskLevelName(level); }

struct Findings {
  RiskLevel risk_level = RiskLevel::kLow;
  std::vector<std::string> flags;  // from ClaimAnalysisTask::kFlags
  std::string summary;             // at most 400 characters
  std::string model_id;            // which checkpoint wrote it
};

// A transaction the fraud model sent to REVIEW, as the forensic stage shows it to the LLM.
// No card number: the pipeline never has it after tokenization.
struct TransactionCase {
  std::string request_id;
  std::string time_utc;  // ISO 8601, e.g. "2026-01-01T10:00:00Z"
  std::string amount;    // with currency, e.g. "42.50 USD"
  std::string merchant_id;
  std::string mcc;
  std::string merchant_country;
  std::string card_country;
  std::string channel;     // e.g. "ECOMMERCE"
  std::string entry_mode;  // e.g. "MANUAL_KEYED"
  double score = 0;
  std::vector<std::string> reasons;  // the fraud model's top reasons, e.g. "amount_zscore = 6.1 (+2.30)"
};

// A task's conversation: the instructions and the case, as a system and a user turn (for a
// chat template, or a remote server that applies its own).
struct TaskMessages {
  std::string system;
  std::string user;
};

class ClaimAnalysisTask {
 public:
  static const std::vector<std::string>& Flags();  // inconsistent_dates, ..., none
  // {risk_level: low|medium|high, flags: [flag, ...] (1-7), summary: string (<= 400)}.
  static const std::string& Schema();

  // Prompt token ids: a system turn (the instructions) and a user turn (the claim) through the
  // checkpoint's chat template when it has one (llm/chat_template.h), else ChatML markers when
  // its tokenizer has them, else plain text. The claim's own text cannot forge control
  // tokens: special-token text in it is read as plain text. An error when the chat template
  // refuses the conversation.
  static Result<std::vector<int32_t>> PromptIds(const Tokenizer& tokenizer, const ClaimFields& claim);
  static TaskMessages Messages(const ClaimFields& claim);

  // Parses and checks the model's JSON (enum values, known flags, summary length).
  static Result<Findings> ParseFindings(const std::string& json_text);
  // The findings of one generation under Schema(): kDeadlineExceeded when a deadline cut it short,
  // kInternal when it does not parse.
  static Result<Findings> FindingsFrom(const GenerationResult& generated, const std::string& model_id);

  // Generates under the schema (greedy unless options say otherwise) and parses.
  static Result<Findings> Analyze(Generator& generator, const Tokenizer& tokenizer, const ClaimFields& claim,
                                  GenerationOptions options, const std::string& model_id);
};

// The forensic stage of the transaction pipeline: the same output schema and Findings as the
// claim-analysis task, with a prompt built from a REVIEW decision.
class TransactionReviewTask {
 public:
  static Result<std::vector<int32_t>> PromptIds(const Tokenizer& tokenizer, const TransactionCase& tx);
  static TaskMessages Messages(const TransactionCase& tx);
  // As ClaimAnalysisTask::Analyze. kDeadlineExceeded when options.deadline cut the output short.
  static Result<Findings> Analyze(Generator& generator, const Tokenizer& tokenizer, const TransactionCase& tx,
                                  GenerationOptions options, const std::string& model_id);
};

}  // namespace txscore::llm
