// The synchronous scoring pipeline: one transaction in, one decision out.
//
//   validate -> tokenize PAN -> read card state
//   -> the pipeline's stages (config.graph), each after the stages it reads from:
//      features -> xgboost model(s) [-> blend] -> decision [-> llm_findings when its `when` holds]
//   -> one WriteBatch {audit record, new card state}, durable before Score returns.
//
// Stages run one after another in the graph's order (they take microseconds, apart from the
// LLM); a stage runs when every stage it comes after ran and its condition holds.
//
// Deadlines: every stage has one, arrival + its budget_ms (default: the pipeline's
// deadline_ms), capped by the request's own Transaction.budget_ms. The stages the decision
// depends on always run: a reply without a decision helps nobody. Any other stage that has not
// started by its deadline is skipped, with everything downstream of it; the LLM stage is cut
// short when its deadline passes mid-generation. Skipped and cut-short stages are named in the
// outcome (skipped_stages, degraded_stages); a stage whose condition is false is in neither.
//
// Thread safety: Score may be called from many threads. Requests for the same card are
// serialised (a striped lock held from the state read to the write), so concurrent
// transactions of one card never lose each other's state updates; different cards run in
// parallel. The forensic stage runs outside that lock (it takes milliseconds to seconds);
// afterwards the card's state is read again and this transaction applied to it, so a
// transaction of the same card that finished meanwhile is not lost.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/card_token.h"
#include "fraud/entity_state.h"
#include "fraud/transaction.h"
#include "fraud/xgboost_model.h"
#include "pipelines/config.h"
#include "pipelines/decision.h"
#include "pipelines/forensic_stage.h"
#include "pipelines/model_stages.h"
#include "pipelines/placement.h"
#include "storage/audit_log.h"
#include "storage/database.h"

namespace txscore::pipelines {

struct StageTiming {
  std::string stage;
  int64_t elapsed_us = 0;
};

struct ScoreOutcome {
  std::string request_id;
  std::string card_token;
  double score = 0;
  Decision decision = Decision::kApprove;
  std::vector<Reason> reasons;
  std::string model_id;
  std::string model_version;
  std::string pipeline_version;
  // validate, state, <features stage>, <model stage>, <decision stage>, persist
  std::vector<StageTiming> timings;
  // Stages that started but did not finish in full (the forensic stage cut short by the
  // deadline, or failing), and stages that should have run but did not start (deadline).
  // A conditional stage whose condition is false (findings for APPROVE) is in neither.
  std::vector<std::string> degraded_stages;
  std::vector<std::string> skipped_stages;
  std::optional<llm::Findings> findings;  // from the forensic stage, when it ran and finished
  std::string forensic_device;            // where the forensic stage ran; empty when it did not
  // The score of every xgboost and blend stage that ran, shadow models included, in run order.
  std::vector<std::pair<std::string, double>> stage_scores;
};

// What the program provides beyond the pipeline file.
struct PipelineRuntime {
  // Needed when the pipeline has an llm_findings stage: llm::Decoder::Load (libtorch), which
  // this library does not link.
  llm::DecoderLoader load_decoder;
  // The devices of this process (accelerator::DiscoverDevices). Null: no discovery ran, every
  // stage runs on the CPU, and a placement naming another device is refused.
  const accelerator::DeviceRegistry* devices = nullptr;
  // Claims pipelines: another pipeline's LLM stage to use when it reads the same checkpoint,
  // instead of loading the model again; its batcher then serves both (requests first, see
  // dynamic_batcher.h) and its settings apply. Null: the pipeline loads its own.
  ForensicStage* shared_llm_stage = nullptr;
  // Default: false. Claims pipelines inside a server: the LLM stage's thread runs at the OS's
  // lowest priority, so batch work leaves the cores to requests.
  bool background = false;
  // The clock deadlines are measured with. Default: std::chrono::steady_clock. Tests of
  // deadlines pass their own; the forensic stage's batcher keeps the steady clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

class ScoringPipeline {
 public:
  // Loads the card key and the models named in `config` and places its stages; `db` (and
  // runtime.devices) must outlive the pipeline.
  static Result<std::unique_ptr<ScoringPipeline>> Create(const PipelineConfig& config, storage::Database* db,
                                                         const PipelineRuntime& runtime = {});

  // Takes the transaction by value: its PAN and card verification code are wiped from
  // memory once tokenized. kInvalidArgument (with the field) for bad input, in which case
  // nothing was written; kInternal / kDataLoss when storage or the model fails.
  Result<ScoreOutcome> Score(fraud::RawTransaction raw);

  // The decision's model: the first xgboost stage the decision depends on.
  const fraud::XGBoostModel& model() const { return *primary_model_; }
  const PipelineConfig& config() const { return config_; }
  // Where each model stage runs; empty without runtime.devices.
  const PipelinePlan& plan() const { return plan_; }
  // Forensic-stage requests that moved to a fallback device because one failed.
  uint64_t forensic_device_fallbacks() const { return forensic_ ? forensic_->device_fallbacks() : 0; }
  ForensicStage* forensic_stage() { return forensic_.get(); }  // null without one
  storage::AuditLog& audit_log() { return audit_log_; }

 private:
  ScoringPipeline(PipelineConfig config, storage::Database* db) : config_(std::move(config)), db_(db), audit_log_(db) {}

  // The card's token: from the PAN (validated, then wiped) or the caller's own token.
  Result<std::string> CardToken(fraud::RawTransaction* raw) const;
  Result<fraud::CardState> ReadCardState(const std::string& card_token) const;
  // Runs the forensic stage (index `stage`) for a request its condition selected; writes its
  // findings into `out` and what happened into `outcome`.
  void RunForensicStage(int stage, const fraud::Transaction& tx, const RequestValues& values,
                        std::chrono::steady_clock::time_point deadline, StageOutputs* out, ScoreOutcome* outcome);

  static constexpr size_t kCardLockStripes = 256;

  PipelineConfig config_;
  storage::Database* db_;
  storage::AuditLog audit_log_;
  std::unique_ptr<fraud::CardTokenizer> tokenizer_;
  std::vector<PreparedStage> runners_;  // indexed like config_.graph
  const fraud::XGBoostModel* primary_model_ = nullptr;
  std::function<std::chrono::steady_clock::time_point()> clock_;
  std::unique_ptr<ForensicStage> forensic_;  // null without an llm_findings stage
  PipelinePlan plan_;
  std::array<std::mutex, kCardLockStripes> card_locks_;
};

}  // namespace txscore::pipelines
