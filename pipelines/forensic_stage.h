// The llm_findings stage: for a decision its `when` selects (default: REVIEW), an LLM reads
// the transaction and the fraud model's reasons and writes Findings under the findings schema
// (llm/claim_analysis.h).
//
// One analysis runs at a time: on a CPU, concurrent generations share the same cores and all
// finish later. A request waits for its turn only until its deadline, and generation stops at
// the deadline; either way the decision stands and the result says the stage did not finish.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/transaction.h"
#include "llm/claim_analysis.h"
#include "llm/decoder.h"
#include "llm/generator.h"
#include "llm/tokenizer.h"
#include "pipelines/config.h"
#include "pipelines/decision.h"

namespace txscore::pipelines {

struct ForensicResult {
  enum class Outcome {
    kAnalysed,  // findings written
    kSkipped,   // never started: the deadline passed before its turn came
    kCutShort,  // started, but the deadline came before the findings were complete
    kFailed,    // the model failed; `detail` says how
  };
  Outcome outcome = Outcome::kAnalysed;
  std::optional<llm::Findings> findings;  // set for kAnalysed
  std::string detail;
};

class ForensicStage {
 public:
  // Loads the checkpoint in config.model_dir with `load_decoder` and its tokenizer.
  static Result<std::unique_ptr<ForensicStage>> Create(const FindingsStageConfig& config,
                                                       const llm::DecoderLoader& load_decoder);

  // Thread-safe. Never throws; failures are in the result.
  ForensicResult Analyze(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons,
                         std::chrono::steady_clock::time_point deadline);

  const std::string& model_id() const { return model_id_; }

  // The prompt's view of a transaction (exposed for tests).
  static llm::TransactionCase CaseFor(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons);

 private:
  ForensicStage() = default;

  FindingsStageConfig config_;
  std::string model_id_;
  std::unique_ptr<llm::Decoder> decoder_;
  std::unique_ptr<llm::Tokenizer> tokenizer_;
  std::unique_ptr<llm::Generator> generator_;
  std::timed_mutex turn_;  // one analysis at a time
};

}  // namespace txscore::pipelines
