// The synchronous scoring pipeline: one transaction in, one decision out.
//
//   validate -> tokenize PAN -> read card state
//   -> the pipeline's stages (config.graph), each after the stages it reads from, e.g.
//      features -> xgboost model(s) [-> blend] [+ rules] -> decision [-> llm_findings when its `when` holds]
//   -> one WriteBatch {audit record, new card state}, durable before Score returns.
//
// Stages run one after another in the graph's order (they take microseconds, apart from the
// LLM), each through the one PreparedStage interface (stage_kind.h); a stage runs when every
// stage it reads from ran and its condition holds.
//
// Deadlines: every stage has one, arrival + its budget_ms (default: the pipeline's
// deadline_ms), capped by the request's own Transaction.budget_ms. The stages the decision
// depends on always run: a reply without a decision helps nobody. Any other stage that has not
// started by its deadline is skipped, with everything downstream of it; the LLM stage is cut
// short when its deadline passes mid-generation. Skipped and cut-short stages are named in the
// outcome (skipped_stages, degraded_stages); a stage whose condition is false is in neither.
//
// A slow stage that can answer later (the local LLM) holds no thread while it runs when the
// request came through ScoreThen on a thread with a ContinuationHost (the RPC server's): the
// request is parked on the heap and goes on on one of the host's threads (Resume).
//
// Thread safety: Score may be called from many threads. Requests for the same card are
// serialised (a striped lock held from the state read to the write), so concurrent
// transactions of one card never lose each other's state updates; different cards run in
// parallel. A slow stage (PreparedStage::slow, the LLM) runs outside that lock;
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

#include "common/logging.h"
#include "common/result.h"
#include "fraud/card_token.h"
#include "fraud/entity_state.h"
#include "fraud/transaction.h"
#include "pipelines/bundle_digest.h"
#include "pipelines/config.h"
#include "pipelines/placement.h"
#include "pipelines/stage_kind.h"
#include "storage/audit_log.h"
#include "storage/database.h"

namespace txscore::pipelines {

struct StageTiming {
  std::string stage;
  int64_t elapsed_us = 0;
  // An index for the timing, so that nothing is looked up by name per request. A transaction's:
  // its place among ScoringPipeline::TimingSlotNames (validate, state, each graph stage, persist),
  // which metrics index their series by. A claim's (ClaimsPipeline): the stage's graph index.
  int slot = -1;
};

// A stage an outcome names: its index in the pipeline's graph (metrics index by it) and its
// name (replies and the audit record show it).
struct StageRef {
  int index = -1;
  std::string name;
  bool operator==(const StageRef&) const = default;
};

struct ScoreOutcome {
  std::string request_id;
  std::string card_token;
  double score = 0;
  Decision decision = Decision::kApprove;
  std::vector<Reason> reasons;
  std::vector<RuleHit> rule_hits;  // the rules that matched, when the decision reads a verdict
  std::string model_id;
  std::string model_version;
  std::string pipeline_version;
  // validate, state, <features stage>, <model stage>, <decision stage>, persist
  std::vector<StageTiming> timings;
  // Stages that started but did not finish in full (the forensic stage cut short by the
  // deadline, or failing), and stages that should have run but did not start (deadline).
  // A conditional stage whose condition is false (findings for APPROVE) is in neither.
  std::vector<StageRef> degraded_stages;
  std::vector<StageRef> skipped_stages;
  std::optional<llm::Findings> findings;  // from an llm_findings stage, when it ran and finished
  // Where each stage that reports a device ran (model and LLM stages), in run order.
  std::vector<std::pair<std::string, std::string>> devices;
  // The score of every xgboost and blend stage that ran, shadow models included, in run order.
  std::vector<std::pair<std::string, double>> stage_scores;
};

// What every version of a server's transaction pipeline shares, so that replacing the
// pipeline (a reload) changes neither how one card's transactions are serialised nor the
// audit trail's sequence: the database, its one audit writer, the card keys and the card locks.
// Thread-safe.
class ScoringLedger {
 public:
  // Loads the card keys (a keyset or a raw key file, fraud/keyset.h) and starts the audit
  // trail's writer (a new epoch and a start checkpoint signed with a key derived from the
  // primary key); `db` must outlive the ledger.
  static Result<std::shared_ptr<ScoringLedger>> Create(storage::Database* db, const std::string& key_file,
                                                       const fraud::KekSource& kek = {},
                                                       storage::AuditLog::Options audit = {},
                                                       fraud::KeyFileForm form = fraud::KeyFileForm::kKeysetOrRawKey);

  storage::Database& database() const { return *db_; }
  storage::AuditLog& audit_log() { return audit_log_; }
  // The keys in force; a request takes them once and keeps them to its end.
  std::shared_ptr<const fraud::CardTokenizer> tokenizer() const;
  // New keys (a rotation, read by a reload): requests that start from now on use them, and the
  // audit trail's next checkpoints are signed under the new primary key.
  void SetTokenizer(std::shared_ptr<const fraud::CardTokenizer> tokenizer);
  // The lock stripes that serialise the transactions of a card stored under any of `tokens`,
  // in stripe order (every request takes them in that order, so none waits crosswise).
  std::vector<std::mutex*> CardLocks(const std::vector<std::string>& tokens);

 private:
  ScoringLedger(storage::Database* db, storage::AuditLog::Options audit) : db_(db), audit_log_(db, audit) {}
  static constexpr size_t kCardLockStripes = 256;
  storage::Database* db_;
  storage::AuditLog audit_log_;
  mutable std::mutex tokenizer_mutex_;
  std::shared_ptr<const fraud::CardTokenizer> tokenizer_;
  std::array<std::mutex, kCardLockStripes> card_locks_;
};

// The card a transaction is for: the token its state is written under (the primary key's, or
// the caller's own), and the tokens of older keys its state may still be stored under (it is
// then re-keyed: written under `token`, deleted under the older one, in the same batch).
struct CardKeys {
  std::string token;
  std::vector<std::string> older;
  std::vector<std::string> all() const {
    std::vector<std::string> tokens{token};
    tokens.insert(tokens.end(), older.begin(), older.end());
    return tokens;
  }
};

// Where a request writes its card's new state: `write_under`; and, when the state was found
// under an older key's token, `moved_from`, which then gets a "moved to write_under" marker in
// the same batch. A request that started on the keys before a rotation (its primary is now an
// older key) finds the marker and writes where the card lives now: a card's history never
// splits, and never moves back to an older key.
struct CardPlacement {
  std::string write_under;
  std::string moved_from;
  uint64_t read_generation = 0;  // the database's generation() before the state was read
};

// Holds a card's lock stripes (ScoringLedger::CardLocks) from construction to destruction,
// except between unlock() and lock() (around a slow stage).
class CardLockSet {
 public:
  explicit CardLockSet(std::vector<std::mutex*> stripes) : stripes_(std::move(stripes)) { lock(); }
  ~CardLockSet() {
    if (locked_) unlock();
  }
  CardLockSet(const CardLockSet&) = delete;
  CardLockSet& operator=(const CardLockSet&) = delete;
  void lock() {
    for (std::mutex* m : stripes_) m->lock();
    locked_ = true;
  }
  // May be locked again by another thread once unlocked (a request resumed there).
  void unlock() {
    locked_ = false;  // before the stripes are free: the next owner sets it
    for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) (*it)->unlock();
  }

 private:
  std::vector<std::mutex*> stripes_;
  bool locked_ = false;
};

class ScoringPipeline {
 public:
  // Loads the models named in `config` and places and prepares its stages, writing through
  // `ledger` (shared with the pipeline this one replaces, if any). runtime.devices must
  // outlive the pipeline.
  static Result<std::unique_ptr<ScoringPipeline>> Create(const PipelineConfig& config,
                                                         std::shared_ptr<ScoringLedger> ledger,
                                                         const PipelineRuntime& runtime = {});
  // The same with a ledger of its own over `db`, tokenizing with the keys in `key_file`.
  static Result<std::unique_ptr<ScoringPipeline>> Create(const PipelineConfig& config, storage::Database* db,
                                                         const std::string& key_file,
                                                         const PipelineRuntime& runtime = {});

  // A dry run before the pipeline serves (a reload's check): scores a fixed synthetic
  // transaction of a new card through every stage that is not slow, writing nothing, and
  // checks the decision stage produced a score in [0, 1]. Errors say which stage failed.
  Status Canary() const;

  // Takes the transaction by value: its PAN and card verification code are wiped from
  // memory once tokenized. kInvalidArgument (with the field) for bad input, in which case
  // nothing was written; kInternal / kDataLoss when storage or the model fails (logged here,
  // with the request's ids once they are validated).
  Result<ScoreOutcome> Score(fraud::RawTransaction raw);
  // Score without a thread waiting for a slow stage that can answer later (the local LLM,
  // PreparedStage::RunThen): on a thread with a ContinuationHost (common/blocking_wait.h: the
  // RPC server's) such a stage is started with the card unlocked and this returns; the request
  // goes on on one of the host's threads when the stage answers or its deadline comes. On
  // other threads it runs as Score does. `done` is called once with what Score would return
  // (on this thread, before this returns, when nothing answered later). The caller keeps the
  // pipeline alive until `done` is called.
  void ScoreThen(fraud::RawTransaction raw, std::function<void(Result<ScoreOutcome>)> done);
  // For a sharded server (service/shard_router.h), before it routes a card: replaces the PAN
  // by the card's tokens under the keys in force (card_token: the primary's; older_card_tokens:
  // each active key's, oldest first) and wipes it; a caller's token is checked as Score checks
  // it. kInvalidArgument (with the field) for a bad PAN, token or card verification code.
  Status TokenizeCard(fraud::RawTransaction* raw) const;

  const PipelineConfig& config() const { return config_; }
  // The names of the timing slots every outcome's timings fall in, indexed by
  // StageTiming::slot: "validate", "state", each graph stage in graph order, "persist".
  std::vector<std::string> TimingSlotNames() const;
  // Where each placed stage runs; empty without runtime.devices.
  const PipelinePlan& plan() const { return plan_; }
  // The prepared stages, indexed like config().graph.
  const PreparedStage& stage(int index) const { return *stages_[static_cast<size_t>(index)]; }
  const PreparedStage* FindStage(const std::string& name) const;  // null when absent
  // The models the decision depends on, "+"-joined in file order (e.g. "fraud-2026"), as
  // every result and audit record names them.
  const std::string& model_id() const { return model_id_; }
  const std::string& model_version() const { return model_version_; }
  // The bundle digest of the pipeline file and every file its stages read (bundle_digest.h),
  // "sha256:...": taken before the stages were prepared and again after, the same both times.
  // Every audit record names it.
  const BundleDigest& bundle() const { return bundle_; }
  storage::AuditLog& audit_log() { return ledger_->audit_log(); }

 private:
  ScoringPipeline(PipelineConfig config, std::shared_ptr<ScoringLedger> ledger)
      : config_(std::move(config)), ledger_(std::move(ledger)) {}

  struct Request;  // one transaction on its way through the stages (scoring_pipeline.cc)
  // Score and ScoreThen: runs the request, with `host` for a stage that answers later (null:
  // every stage runs on the calling thread).
  void Start(fraud::RawTransaction raw, const std::shared_ptr<ContinuationHost>& host,
             std::function<void(Result<ScoreOutcome>)> done);
  // Validates and tokenizes the transaction, locks its card and reads the card's state.
  Status Begin(fraud::RawTransaction raw, Request* request);
  // Runs the stages from the request's next one on, then persists and answers (Finish); or
  // returns once a slow stage has been started through `host`, to go on in Resume.
  void Continue(const std::shared_ptr<Request>& request, const std::shared_ptr<ContinuationHost>& host);
  // The stages from the request's next one on. False: a slow stage answers later (RunThen) and
  // the request is Resume's; the card is unlocked then.
  Result<bool> RunStages(const std::shared_ptr<Request>& request, const std::shared_ptr<ContinuationHost>& host);
  // A slow stage answered: locks the card, reads its state again (another transaction of the
  // card may have landed meanwhile) and goes on.
  void Resume(const std::shared_ptr<Request>& request, const std::shared_ptr<ContinuationHost>& host);
  // Records in the request's outcome what stage `index` reported.
  void AfterStage(int index, const StageReport& report, Request* request);
  // The decision and the card's new state, written in one batch (the audit trail's commit).
  Result<ScoreOutcome> Persist(Request* request);
  // Logs a failure, unlocks the card and calls the request's `done`. Called inside the
  // request's LogContext (its callers set it), so the line names the request.
  void Finish(Request* request, Result<ScoreOutcome> result);
  // The card's tokens: from the PAN (validated, then wiped) under the keys of `tokenizer`, or
  // the caller's own token (refused when made under a retired key).
  Result<CardKeys> CardToken(fraud::RawTransaction* raw, const fraud::CardTokenizer& tokenizer) const;
  // The card's state: under card.token, else under the first older token that holds one,
  // following "moved to" markers left by re-keying; `placement` says where to write it.
  Result<fraud::CardState> ReadCardState(const CardKeys& card, CardPlacement* placement) const;
  // Follows markers from `token`: the token the state is stored under and the state, or
  // nullopt when the card has none there.
  Result<std::optional<std::pair<std::string, fraud::CardState>>> Resolve(const std::string& token) const;
  PipelineConfig config_;
  std::shared_ptr<ScoringLedger> ledger_;
  std::vector<std::unique_ptr<PreparedStage>> stages_;  // indexed like config_.graph
  std::string model_id_, model_version_;
  BundleDigest bundle_;
  DeadlineClock clock_;  // PipelineRuntime::clock
  PipelinePlan plan_;
};

}  // namespace txscore::pipelines
