#include "pipelines/scoring_pipeline.h"

#include <algorithm>
#include <chrono>

#include "common/blocking_wait.h"
#include "common/bytes.h"
#include "common/logging.h"
#include "common/wipe.h"
#include "fraud/entity_state.h"

namespace txscore::pipelines {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Measures consecutive stages: each Lap() records the time since the previous one.
class StageClock {
 public:
  explicit StageClock(std::vector<StageTiming>* out) : out_(out), last_(SteadyClock::now()) {}
  void Lap(const std::string& stage, int slot) {
    const auto now = SteadyClock::now();
    out_->push_back({stage, std::chrono::duration_cast<std::chrono::microseconds>(now - last_).count(), slot});
    last_ = now;
  }

 private:
  std::vector<StageTiming>* out_;
  SteadyClock::time_point last_;
};

// Timing slots (ScoringPipeline::TimingSlotNames): the two fixed steps before the graph,
// the graph's stages, then persisting.
constexpr int kValidateSlot = 0, kStateSlot = 1, kFirstStageSlot = 2;

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

storage::AuditCheckpointKey CheckpointKeyOf(const fraud::CardTokenizer& tokenizer) {
  const fraud::KeysetKey& primary = tokenizer.keyset().primary();
  return {primary.id, fraud::PurposeKey(primary, fraud::KeyPurpose::kAuditSigning)};
}

}  // namespace

Result<std::shared_ptr<ScoringLedger>> ScoringLedger::Create(storage::Database* db, const std::string& key_file,
                                                             const fraud::KekSource& kek,
                                                             storage::AuditLog::Options audit,
                                                             fraud::KeyFileForm form) {
  std::shared_ptr<ScoringLedger> ledger(new ScoringLedger(db, audit));
  TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<fraud::CardTokenizer> tokenizer,
                           fraud::CardTokenizer::FromKeyFile(key_file, kek, form));
  ledger->tokenizer_ = std::move(tokenizer);
  TXSCORE_RETURN_IF_ERROR(ledger->audit_log_.BeginWriting(CheckpointKeyOf(*ledger->tokenizer_)));
  return ledger;
}

std::shared_ptr<const fraud::CardTokenizer> ScoringLedger::tokenizer() const {
  std::lock_guard<std::mutex> lock(tokenizer_mutex_);
  return tokenizer_;
}

void ScoringLedger::SetTokenizer(std::shared_ptr<const fraud::CardTokenizer> tokenizer) {
  audit_log_.SetCheckpointKey(CheckpointKeyOf(*tokenizer));
  std::lock_guard<std::mutex> lock(tokenizer_mutex_);
  tokenizer_.swap(tokenizer);
}

std::vector<std::mutex*> ScoringLedger::CardLocks(const std::vector<std::string>& tokens) {
  std::vector<size_t> stripes;
  for (const std::string& token : tokens) stripes.push_back(Fnv1a64(token) % kCardLockStripes);
  std::sort(stripes.begin(), stripes.end());
  stripes.erase(std::unique(stripes.begin(), stripes.end()), stripes.end());
  std::vector<std::mutex*> locks;
  for (size_t stripe : stripes) locks.push_back(&card_locks_[stripe]);
  return locks;
}

Result<std::unique_ptr<ScoringPipeline>> ScoringPipeline::Create(const PipelineConfig& config, storage::Database* db,
                                                                 const std::string& key_file,
                                                                 const PipelineRuntime& runtime) {
  TXSCORE_ASSIGN_OR_RETURN(std::shared_ptr<ScoringLedger> ledger, ScoringLedger::Create(db, key_file));
  return Create(config, std::move(ledger), runtime);
}

Result<std::unique_ptr<ScoringPipeline>> ScoringPipeline::Create(const PipelineConfig& config,
                                                                 std::shared_ptr<ScoringLedger> ledger,
                                                                 const PipelineRuntime& runtime) {
  if (config.items != ItemKind::kTransaction) {
    return FailedPrecondition(config.source_path +
                              " is a claims pipeline: `txscore batch run` runs it, or a server's claims jobs "
                              "(jobs.claims_pipeline in the settings file)");
  }
  std::unique_ptr<ScoringPipeline> pipeline(new ScoringPipeline(config, std::move(ledger)));
  pipeline->clock_ = runtime.clock ? runtime.clock : SteadyDeadlineClock();
  TXSCORE_ASSIGN_OR_RETURN(pipeline->bundle_, DigestPipelineBundle(config));
  // Nothing of a bundle that is not the pinned one is loaded (a model file is parsed only after).
  TXSCORE_RETURN_IF_ERROR(CheckPinnedDigest(config.pinned_digest, pipeline->bundle_, config.pinned_in));
  TXSCORE_ASSIGN_OR_RETURN(pipeline->plan_, PlaceStages(config, runtime.devices));
  TXSCORE_ASSIGN_OR_RETURN(pipeline->stages_, PrepareStages(config, pipeline->plan_, runtime));
  // A file replaced while the stages read it (a deployment copying a new model mid-reload)
  // would leave a digest that does not name what was loaded: refused.
  TXSCORE_ASSIGN_OR_RETURN(BundleDigest after, DigestPipelineBundle(config));
  if (after.digest != pipeline->bundle_.digest) {
    return FailedPrecondition("a file of pipeline " + config.source_path + " changed while it was loaded (digest " +
                              pipeline->bundle_.digest + ", then " + after.digest +
                              "); load it again once the files are in place");
  }
  for (size_t i = 0; i < pipeline->stages_.size(); ++i) {
    const std::optional<ModelVersion> model = pipeline->stages_[i]->model();
    if (!model || !config.graph.stage(static_cast<int>(i)).required) continue;
    pipeline->model_id_ += (pipeline->model_id_.empty() ? "" : "+") + model->id;
    pipeline->model_version_ += (pipeline->model_version_.empty() ? "" : "+") + model->version;
  }
  return pipeline;
}

const PreparedStage* ScoringPipeline::FindStage(const std::string& name) const {
  const int index = config_.graph.Find(name);
  return index < 0 ? nullptr : stages_[static_cast<size_t>(index)].get();
}

Status ScoringPipeline::TokenizeCard(fraud::RawTransaction* raw) const {
  const std::shared_ptr<const fraud::CardTokenizer> tokenizer = ledger_->tokenizer();
  TXSCORE_ASSIGN_OR_RETURN(CardKeys card, CardToken(raw, *tokenizer));
  raw->card_number.reset();  // wiped by CardToken
  raw->card_token = std::move(card.token);
  raw->older_card_tokens = std::move(card.older);
  return Status::Ok();
}

Result<CardKeys> ScoringPipeline::CardToken(fraud::RawTransaction* raw, const fraud::CardTokenizer& tokenizer) const {
  if (raw->card_verification_code) {
    Status cvc = fraud::ValidateCardVerificationCode(*raw->card_verification_code);
    WipeString(&*raw->card_verification_code);
    raw->card_verification_code.reset();
    if (!cvc.ok()) {
      if (raw->card_number) WipeString(&*raw->card_number);
      return cvc.error();
    }
  }
  if (raw->card_number.has_value() == raw->card_token.has_value()) {
    if (raw->card_number) WipeString(&*raw->card_number);
    return InvalidArgument("exactly one of card_number and card_token must be set", "card_number");
  }
  if (raw->card_token) {
    TXSCORE_RETURN_IF_ERROR(fraud::ValidateCardToken(*raw->card_token));
    TXSCORE_RETURN_IF_ERROR(tokenizer.CheckCallerToken(*raw->card_token));
    CardKeys card{*raw->card_token, {}};
    // Only txscore's own keyed tokens, as a replica that tokenized the card number sends them:
    // a caller's own token form never merges another token's history into it.
    if (!raw->older_card_tokens.empty() && fraud::Keyset::KeyIdOf(*raw->card_token).empty()) {
      return InvalidArgument("older_card_tokens goes with a keyed card_token (kN_...)", "older_card_tokens");
    }
    for (const std::string& older : raw->older_card_tokens) {
      if (fraud::Keyset::KeyIdOf(older).empty()) {
        return InvalidArgument("older_card_tokens holds keyed tokens (kN_...) only", "older_card_tokens");
      }
      Status valid = fraud::ValidateCardToken(older);
      if (!valid.ok()) return InvalidArgument(valid.error().message, "older_card_tokens");
      TXSCORE_RETURN_IF_ERROR(tokenizer.CheckCallerToken(older, "older_card_tokens"));
      card.older.push_back(older);
    }
    return card;
  }
  if (!raw->older_card_tokens.empty()) {
    WipeString(&*raw->card_number);
    return InvalidArgument("older_card_tokens goes with card_token, not card_number", "older_card_tokens");
  }
  Status valid = fraud::ValidatePan(*raw->card_number);
  CardKeys card;
  if (valid.ok()) {
    std::vector<std::string> tokens = tokenizer.Candidates(*raw->card_number);
    card.token = std::move(tokens.front());
    card.older.assign(std::make_move_iterator(tokens.begin() + 1), std::make_move_iterator(tokens.end()));
  }
  WipeString(&*raw->card_number);
  if (!valid.ok()) return valid.error();
  return card;
}

namespace {
// The value left under a re-keyed card's old token: this prefix, then the token it moved to.
constexpr std::string_view kMovedTo = "moved-to:";
constexpr int kMaxMoves = 16;  // one per rotation; a longer chain is a corrupt database
}  // namespace

Result<std::optional<std::pair<std::string, fraud::CardState>>> ScoringPipeline::Resolve(
    const std::string& token) const {
  std::string at = token;
  for (int hop = 0; hop <= kMaxMoves; ++hop) {
    Result<std::optional<std::string>> stored = ledger_->database().Get(storage::ColumnFamily::kEntityState, at);
    if (!stored.ok()) return stored.error();
    if (!stored->has_value()) return std::optional<std::pair<std::string, fraud::CardState>>();
    const std::string& value = **stored;
    if (value.rfind(kMovedTo, 0) == 0) {
      at = value.substr(kMovedTo.size());
      continue;
    }
    TXSCORE_ASSIGN_OR_RETURN(fraud::CardState state, fraud::DecodeCardState(value));
    return std::optional<std::pair<std::string, fraud::CardState>>(std::pair{at, std::move(state)});
  }
  return DataLoss("card state: more than " + std::to_string(kMaxMoves) + " moved-to markers in a row");
}

Result<fraud::CardState> ScoringPipeline::ReadCardState(const CardKeys& card, CardPlacement* placement) const {
  *placement = CardPlacement{card.token, "", ledger_->database().generation()};
  TXSCORE_ASSIGN_OR_RETURN(auto found, Resolve(card.token));
  if (found) {
    placement->write_under = found->first;  // card.token, or where a marker says the card moved
    return std::move(found->second);
  }
  for (const std::string& older : card.older) {
    TXSCORE_ASSIGN_OR_RETURN(found, Resolve(older));
    if (!found) continue;
    placement->moved_from = found->first;  // re-keyed under card.token when written
    return std::move(found->second);
  }
  return fraud::CardState();
}

// One transaction on its way through the stages. On the heap: while a slow stage answers later
// (RunThen), the stage's answer holds it and no thread does.
struct ScoringPipeline::Request {
  std::function<void(Result<ScoreOutcome>)> done;  // called once (Finish), then cleared
  SteadyClock::time_point arrival;
  ScoreOutcome outcome;
  StageClock clock{&outcome.timings};
  std::string request_id, trace_id;  // set once validated: the request's log lines name them
  fraud::Transaction tx;
  CardKeys card;
  std::optional<CardLockSet> card_lock;
  CardPlacement placement;  // where the new state goes, and an older token it moves from
  Result<fraud::CardState> state = fraud::CardState();
  RequestValues values;
  std::vector<bool> skipped;
  size_t next = 0;          // the place in the graph's order of the stage to consider next
  StageReport slow_report;  // what the stage answering later (RunThen) reports
  // Set when starting a stage that answers later threw: the request was answered with the
  // error, and whatever the stage scheduled before throwing must not go on with it.
  std::atomic<bool> abandoned{false};
};

Status ScoringPipeline::Begin(fraud::RawTransaction raw, Request* request) {
  Request& r = *request;
  r.arrival = clock_();
  // Validate everything before touching storage: bad input writes nothing.
  const std::shared_ptr<const fraud::CardTokenizer> tokenizer = ledger_->tokenizer();  // one key set, start to end
  TXSCORE_ASSIGN_OR_RETURN(r.card, CardToken(&raw, *tokenizer));
  TXSCORE_ASSIGN_OR_RETURN(r.tx, fraud::ValidateTransaction(raw));
  r.tx.card_token = r.card.token;
  // From here on, the request's log lines name it (both ids are validated above).
  r.request_id = r.tx.request_id;
  r.trace_id = r.tx.traceparent.empty() ? "" : r.tx.traceparent.substr(3, 32);
  r.clock.Lap("validate", kValidateSlot);

  r.card_lock.emplace(ledger_->CardLocks(r.card.all()));
  r.state = ReadCardState(r.card, &r.placement);
  if (!r.state.ok()) return r.state.error();
  r.clock.Lap("state", kStateSlot);
  r.values.resize(config_.graph.size());
  r.skipped.assign(config_.graph.size(), false);
  return Status::Ok();
}

Result<bool> ScoringPipeline::RunStages(const std::shared_ptr<Request>& request,
                                        const std::shared_ptr<ContinuationHost>& host) {
  Request& r = *request;
  const StageGraph& graph = config_.graph;
  for (; r.next < graph.order().size(); ++r.next) {
    const int i = graph.order()[r.next];
    const GraphStage& stage = graph.stage(i);
    if (!graph.ShouldRun(i, r.values)) {
      // Downstream of a skipped stage is skipped too; a false condition is no news.
      for (const InputBinding& b : stage.inputs) {
        for (int u : b.stages) {
          if (r.skipped[static_cast<size_t>(u)]) r.skipped[static_cast<size_t>(i)] = true;
        }
      }
      if (r.skipped[static_cast<size_t>(i)]) r.outcome.skipped_stages.push_back({i, stage.name});
      continue;
    }
    const int stage_budget_ms = config_.settings[static_cast<size_t>(i)]->budget_ms;
    int budget_ms = stage_budget_ms > 0 ? stage_budget_ms : config_.deadline_ms;
    if (r.tx.budget_ms) budget_ms = std::min(budget_ms, *r.tx.budget_ms);
    const SteadyClock::time_point deadline = r.arrival + std::chrono::milliseconds(budget_ms);
    if (!stage.required && clock_() >= deadline) {
      r.skipped[static_cast<size_t>(i)] = true;
      r.outcome.skipped_stages.push_back({i, stage.name});
      continue;
    }
    const PreparedStage& prepared = *stages_[static_cast<size_t>(i)];
    StageOutputs& out = r.values[static_cast<size_t>(i)];
    const ScoredItem item{&r.tx, &*r.state, nullptr, 1, deadline};
    if (prepared.slow() && host != nullptr) {
      r.slow_report = StageReport();
      // Started with the card locked: the answer (Resume, on another thread) locks it again
      // only after this thread has let it go below.
      bool started = false;
      try {
        started = prepared.RunThen(StageInputs(stage, r.values), item, &out, &r.slow_report, host,
                                   [this, request, host] { Resume(request, host); });
      } catch (...) {
        r.abandoned = true;  // answered below with the error (Finish), never by Resume
        throw;
      }
      if (started) {
        r.card_lock->unlock();  // the last use of the request here: Resume owns it from now on
        return false;
      }
    }
    StageReport report;
    Status ran;
    if (prepared.slow()) {
      bool refused = false;
      {
        // The thread's pool may lend its place to other work while this waits, or refuse the
        // wait when it has no room for one more: then the stage is skipped, as one whose
        // deadline came first, and the card stays locked (common/blocking_wait.h).
        ScopedBlockingWait waiting;
        refused = waiting.refused();
        if (!refused) {
          r.card_lock->unlock();
          ran = prepared.Run(StageInputs(stage, r.values), item, &out, &report);
        }
      }
      if (refused) {
        report.outcome = StageReport::Outcome::kSkipped;
      } else {
        r.card_lock->lock();
        r.state = ReadCardState(r.card, &r.placement);  // another transaction of this card may have landed
        if (!r.state.ok()) return r.state.error();
      }
    } else {
      ran = prepared.Run(StageInputs(stage, r.values), item, &out, &report);
    }
    TXSCORE_RETURN_IF_ERROR(ran);
    AfterStage(i, report, &r);
  }
  return true;
}

void ScoringPipeline::Resume(const std::shared_ptr<Request>& request, const std::shared_ptr<ContinuationHost>& host) {
  Request& r = *request;
  if (r.abandoned.load()) return;
  const LogContext log_context(r.request_id, r.trace_id);
  try {
    r.card_lock->lock();
    r.state = ReadCardState(r.card, &r.placement);  // another transaction of this card may have landed meanwhile
    if (!r.state.ok()) return Finish(&r, r.state.error());
    AfterStage(config_.graph.order()[r.next], r.slow_report, &r);
  } catch (const std::exception& e) {
    if (r.done) Finish(&r, Internal(std::string("the request failed: ") + e.what()));
    return;
  }
  ++r.next;
  Continue(request, host);
}

void ScoringPipeline::AfterStage(int index, const StageReport& report, Request* request) {
  Request& r = *request;
  const GraphStage& stage = config_.graph.stage(index);
  const StageKindSpec& spec = config_.kinds[static_cast<size_t>(index)]->spec();
  StageOutputs& out = r.values[static_cast<size_t>(index)];
  ScoreOutcome& outcome = r.outcome;
  out.ran = report.outcome == StageReport::Outcome::kDone;
  if (!report.device.empty()) outcome.devices.emplace_back(stage.name, report.device);
  for (const std::string& failed : report.failed_devices) {
    if (failed == report.device) continue;  // the last one tried: reported below as the stage's failure
    Log("pipeline")
        .warn("stage {} failed on {} for request {}; tried the next device ({})", stage.name, failed, r.tx.request_id,
              report.device);
  }
  switch (report.outcome) {
    case StageReport::Outcome::kDone:
      if (spec.reports_score) outcome.stage_scores.emplace_back(stage.name, out.score);
      if (out.findings) outcome.findings = out.findings;
      break;
    case StageReport::Outcome::kSkipped:
      outcome.skipped_stages.push_back({index, stage.name});
      break;
    case StageReport::Outcome::kFailed:
      // The decision stands without this stage; the operator sees why in the log.
      Log("pipeline").warn("stage {} failed for request {}: {}", stage.name, r.tx.request_id, report.detail);
      [[fallthrough]];
    case StageReport::Outcome::kCutShort:
      outcome.degraded_stages.push_back({index, stage.name});
      break;
  }
  r.clock.Lap(stage.name, kFirstStageSlot + index);
}

std::vector<std::string> ScoringPipeline::TimingSlotNames() const {
  std::vector<std::string> names = {"validate", "state"};
  for (const GraphStage& stage : config_.graph.stages()) names.push_back(stage.name);
  names.push_back("persist");
  return names;
}

Status ScoringPipeline::Canary() const {
  // A card-present purchase of a card with no history, at a fixed time: every feature a
  // transaction stage computes is defined or deliberately missing, and nothing is stored.
  fraud::Transaction tx;
  tx.request_id = "reload-canary";
  tx.timestamp_ms = 1767261600000;  // 2026-01-01T10:00:00Z
  tx.amount_minor = 4250;
  tx.currency = "USD";
  tx.card_token = std::string(64, '0');
  tx.merchant_id = "canary-merchant";
  tx.mcc = "5411";
  tx.merchant_country = "US";
  tx.card_country = "US";
  tx.channel = fraud::Channel::kCardPresent;
  tx.entry_mode = fraud::EntryMode::kChip;
  const fraud::CardState state;
  const StageGraph& graph = config_.graph;
  RequestValues values(graph.size());
  for (int i : graph.order()) {
    const PreparedStage& stage = *stages_[static_cast<size_t>(i)];
    if (stage.slow() || !graph.ShouldRun(i, values)) continue;
    StageOutputs& out = values[static_cast<size_t>(i)];
    StageReport report;
    const ScoredItem item{&tx, &state, nullptr, 1, clock_() + std::chrono::minutes(1)};
    Status ran = stage.Run(StageInputs(graph.stage(i), values), item, &out, &report);
    if (!ran.ok()) {
      return FailedPrecondition("the canary transaction failed in stage " + graph.stage(i).name + ": " +
                                ran.error().message);
    }
    out.ran = report.outcome == StageReport::Outcome::kDone;
  }
  const StageOutputs& decided = values[static_cast<size_t>(graph.sink())];
  if (!decided.ran || !(decided.score >= 0 && decided.score <= 1)) {
    return FailedPrecondition("the canary transaction got no decision with a score in [0, 1] (score " +
                              std::to_string(decided.score) + ")");
  }
  return Status::Ok();
}

Result<ScoreOutcome> ScoringPipeline::Score(fraud::RawTransaction raw) {
  std::optional<Result<ScoreOutcome>> scored;
  Start(std::move(raw), nullptr, [&scored](Result<ScoreOutcome> result) { scored.emplace(std::move(result)); });
  return std::move(*scored);  // with no host, nothing answers later
}

void ScoringPipeline::ScoreThen(fraud::RawTransaction raw, std::function<void(Result<ScoreOutcome>)> done) {
  Start(std::move(raw), ThreadContinuationHost(), std::move(done));
}

void ScoringPipeline::Start(fraud::RawTransaction raw, const std::shared_ptr<ContinuationHost>& host,
                            std::function<void(Result<ScoreOutcome>)> done) {
  auto request = std::make_shared<Request>();
  request->done = std::move(done);
  Status begun = Status::Ok();
  try {
    begun = Begin(std::move(raw), request.get());
  } catch (const std::exception& e) {
    begun = Internal(std::string("the request failed: ") + e.what());
  }
  if (!begun.ok()) {
    const LogContext log_context(request->request_id, request->trace_id);  // set once the ids are valid
    return Finish(request.get(), begun.error());
  }
  Continue(request, host);
}

void ScoringPipeline::Continue(const std::shared_ptr<Request>& request, const std::shared_ptr<ContinuationHost>& host) {
  const LogContext log_context(request->request_id, request->trace_id);
  try {
    Result<bool> ran = RunStages(request, host);
    if (!ran.ok()) return Finish(request.get(), ran.error());
    if (!*ran) return;  // a stage answers later, and the request goes on in Resume
    Finish(request.get(), Persist(request.get()));
  } catch (const std::exception& e) {
    // On a host's thread nobody else would answer it (on the caller's, Score's caller would
    // have seen the exception): answered once, with the error, the card unlocked.
    if (request->done) Finish(request.get(), Internal(std::string("the request failed: ") + e.what()));
  }
}

void ScoringPipeline::Finish(Request* request, Result<ScoreOutcome> result) {
  if (!result.ok() && result.error().code != ErrorCode::kInvalidArgument) {
    Log("pipeline").error("the request failed: {}", result.error().ToString());
  }
  request->card_lock.reset();  // before the answer: the caller may send the card's next transaction at once
  std::exchange(request->done, nullptr)(std::move(result));
}

Result<ScoreOutcome> ScoringPipeline::Persist(Request* request) {
  Request& r = *request;
  const fraud::Transaction& tx = r.tx;
  ScoreOutcome& outcome = r.outcome;
  const StageGraph& graph = config_.graph;
  const StageOutputs& decided = r.values[static_cast<size_t>(graph.sink())];
  outcome.request_id = tx.request_id;
  outcome.card_token = tx.card_token;
  outcome.score = decided.score;
  outcome.decision = decided.decision;
  outcome.reasons = decided.reasons;
  outcome.rule_hits = decided.rule_hits;
  outcome.pipeline_version = config_.version;
  outcome.model_id = model_id_;
  outcome.model_version = model_version_;

  fraud::CardState& state = *r.state;
  const CardPlacement& placement = r.placement;
  fraud::UpdateCardState(tx, &state);
  storage::AuditRecord record;
  record.time_us = NowMicros();
  record.request_id = outcome.request_id;
  record.card_token = outcome.card_token;
  record.transaction_time_ms = tx.timestamp_ms;
  record.model_id = outcome.model_id;
  record.model_version = outcome.model_version;
  record.pipeline_version = outcome.pipeline_version;
  record.pipeline_digest = bundle_.digest;
  record.score = outcome.score;
  record.decision = DecisionName(outcome.decision);
  for (const Reason& reason : outcome.reasons) {
    record.reasons.push_back({reason.feature, reason.contribution, reason.value});
  }
  for (const RuleHit& hit : outcome.rule_hits) {
    record.rule_hits.push_back({hit.rule, hit.decision ? DecisionName(*hit.decision) : ""});
  }
  for (const StageTiming& t : outcome.timings) record.timings_us.emplace_back(t.stage, t.elapsed_us);
  for (const StageRef& s : outcome.degraded_stages) record.degraded_stages.push_back(s.name);
  for (const StageRef& s : outcome.skipped_stages) record.skipped_stages.push_back(s.name);
  if (outcome.findings) {
    record.findings = storage::AuditFindings{llm::RiskLevelName(outcome.findings->risk_level), outcome.findings->flags,
                                             outcome.findings->summary, outcome.findings->model_id};
  }
  for (const auto& [stage, device] : outcome.devices) {
    record.placement += (record.placement.empty() ? "" : ",") + stage + "@" + device;
  }
  record.stage_scores = outcome.stage_scores;
  record.traceparent = tx.traceparent;
  record.caller = tx.caller;
  storage::WriteBatch batch;
  batch.RequireGeneration(placement.read_generation);  // the state it updates was read from this database
  batch.Put(storage::ColumnFamily::kEntityState, placement.write_under, fraud::EncodeCardState(state));
  if (!placement.moved_from.empty()) {  // re-keyed: the old entry says where the card lives now
    batch.Put(storage::ColumnFamily::kEntityState, placement.moved_from, std::string(kMovedTo) + placement.write_under);
  }
  TXSCORE_RETURN_IF_ERROR(ledger_->audit_log().Commit(record, std::move(batch)));
  r.clock.Lap("persist", kFirstStageSlot + static_cast<int>(graph.size()));
  return std::move(outcome);
}

}  // namespace txscore::pipelines
