#include "service/thrift_handler.h"

#include <chrono>

#include "common/logging.h"
#include "common/wipe.h"
#include "service/transaction_json.h"

namespace txscore::service {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

rpc::InvalidRequest ToInvalidRequest(const Error& error) {
  rpc::InvalidRequest e;
  e.field = error.field.empty() ? "transaction" : error.field;
  e.reason = error.message;
  return e;
}

rpc::ServiceError ToServiceError(const Error& error) {
  rpc::ServiceError e;
  e.reason = error.ToString();
  return e;
}

}  // namespace

fraud::RawTransaction TakeFromThrift(const rpc::Transaction& t) {
  fraud::RawTransaction raw = FromThrift(t);
  // The generated processor deserialised `t` into its own non-const arguments object and
  // hands it over as const; its card fields are wiped here so that no copy of them outlives
  // the conversion (the pipeline wipes its own).
  auto& owned = const_cast<rpc::Transaction&>(t);
  WipeString(&owned.card_number);
  WipeString(&owned.card_verification_code);
  return raw;
}

fraud::RawTransaction FromThrift(const rpc::Transaction& t) {
  fraud::RawTransaction raw;
  raw.request_id = t.request_id;
  raw.timestamp_ms = t.timestamp_ms;
  raw.amount_minor = t.amount_minor;
  raw.currency = t.currency;
  if (t.__isset.card_number) raw.card_number = t.card_number;
  if (t.__isset.card_token) raw.card_token = t.card_token;
  if (t.__isset.card_verification_code) raw.card_verification_code = t.card_verification_code;
  raw.merchant_id = t.merchant_id;
  raw.mcc = t.mcc;
  raw.merchant_country = t.merchant_country;
  if (t.__isset.card_country) raw.card_country = t.card_country;
  raw.channel = static_cast<int>(t.channel);
  raw.entry_mode = static_cast<int>(t.entry_mode);
  if (t.__isset.device_id) raw.device_id = t.device_id;
  if (t.__isset.ip_address) raw.ip_address = t.ip_address;
  if (t.__isset.latitude) raw.latitude = t.latitude;
  if (t.__isset.longitude) raw.longitude = t.longitude;
  if (t.__isset.traceparent) raw.traceparent = t.traceparent;
  if (t.__isset.budget_ms) raw.budget_ms = t.budget_ms;
  if (t.__isset.older_card_tokens) raw.older_card_tokens = t.older_card_tokens;
  return raw;
}

rpc::ScoreResult ToThrift(const pipelines::ScoreOutcome& outcome) {
  rpc::ScoreResult r;
  r.request_id = outcome.request_id;
  r.score = outcome.score;
  r.decision = static_cast<rpc::Decision::type>(outcome.decision);
  for (const pipelines::Reason& reason : outcome.reasons) {
    rpc::ReasonCode code;
    code.feature = reason.feature;
    code.contribution = reason.contribution;
    code.value = reason.value;
    r.reasons.push_back(std::move(code));
  }
  r.model_id = outcome.model_id;
  r.model_version = outcome.model_version;
  r.pipeline_version = outcome.pipeline_version;
  for (const pipelines::StageTiming& t : outcome.timings) {
    rpc::StageTiming timing;
    timing.stage = t.stage;
    timing.elapsed_us = t.elapsed_us;
    r.timings.push_back(std::move(timing));
  }
  for (const pipelines::StageRef& s : outcome.degraded_stages) r.degraded_stages.push_back(s.name);
  for (const pipelines::StageRef& s : outcome.skipped_stages) r.skipped_stages.push_back(s.name);
  if (outcome.findings) {
    rpc::Findings f;
    f.__set_risk_level(llm::RiskLevelName(outcome.findings->risk_level));
    f.__set_flags(outcome.findings->flags);
    f.__set_summary(outcome.findings->summary);
    f.__set_model_id(outcome.findings->model_id);
    r.__set_findings(std::move(f));
  }
  r.__set_card_token(outcome.card_token);
  std::map<std::string, double> stage_scores(outcome.stage_scores.begin(), outcome.stage_scores.end());
  r.__set_stage_scores(std::move(stage_scores));
  std::vector<rpc::RuleHit> rule_hits;
  for (const pipelines::RuleHit& hit : outcome.rule_hits) {
    rpc::RuleHit h;
    h.rule = hit.rule;
    if (hit.decision) h.__set_decision(static_cast<rpc::Decision::type>(*hit.decision));
    rule_hits.push_back(std::move(h));
  }
  r.__set_rule_hits(std::move(rule_hits));
  return r;
}

ScoringMetrics::ScoringMetrics(MetricsRegistry* registry, const pipelines::ScoringPipeline& pipeline,
                               RecentDecisions* recent)
    : recent_(recent) {
  const pipelines::PipelineConfig& config = pipeline.config();
  for (const std::string& slot : pipeline.TimingSlotNames()) {
    stage_seconds_.push_back(registry->AddHistogram("txscore_stage_duration_seconds",
                                                    "Time spent in each pipeline stage.", {{"stage", slot}}));
  }
  for (const pipelines::GraphStage& stage : config.graph.stages()) {
    Counter* degraded = nullptr;
    Counter* skipped = nullptr;
    if (!stage.required) {
      constexpr const char* kHelp = "Requests in which a stage did not finish (degraded) or did not start (skipped).";
      degraded =
          registry->AddCounter("txscore_stage_incomplete_total", kHelp, {{"stage", stage.name}, {"how", "degraded"}});
      skipped =
          registry->AddCounter("txscore_stage_incomplete_total", kHelp, {{"stage", stage.name}, {"how", "skipped"}});
    }
    degraded_.push_back(degraded);
    skipped_.push_back(skipped);
  }
  for (pipelines::Decision decision :
       {pipelines::Decision::kApprove, pipelines::Decision::kReview, pipelines::Decision::kDecline}) {
    decisions_[static_cast<size_t>(decision) - 1] = registry->AddCounter(
        "txscore_decisions_total", "Decisions made, by decision.", {{"decision", pipelines::DecisionName(decision)}});
  }
  constexpr std::array<const char*, kMethods> kMethodNames = {"score", "scoreBatch"};
  constexpr std::array<const char*, kRequestOutcomes> kOutcomeNames = {"ok", "invalid", "error"};
  for (size_t m = 0; m < kMethods; ++m) {
    for (size_t o = 0; o < kRequestOutcomes; ++o) {
      requests_[m][o] = registry->AddCounter("txscore_requests_total", "Scoring requests by method and outcome.",
                                             {{"method", kMethodNames[m]}, {"outcome", kOutcomeNames[o]}});
    }
    request_seconds_[m] = registry->AddHistogram("txscore_request_duration_seconds",
                                                 "Time to answer a request, by method.", {{"method", kMethodNames[m]}});
  }
  registry->SetInfo("txscore_model_info", "The loaded fraud model.",
                    {{"model_id", pipeline.model_id()},
                     {"model_version", pipeline.model_version()},
                     {"pipeline", config.name},
                     {"pipeline_version", config.version}});
}

void ScoringMetrics::RecordRequest(Method method, RequestOutcome outcome, double seconds) {
  requests_[static_cast<size_t>(method)][static_cast<size_t>(outcome)]->Increment();
  request_seconds_[static_cast<size_t>(method)]->Observe(seconds);
}

void ScoringMetrics::RecordOutcome(const pipelines::ScoreOutcome& outcome) {
  for (const pipelines::StageTiming& t : outcome.timings) {
    stage_seconds_.at(static_cast<size_t>(t.slot))->Observe(static_cast<double>(t.elapsed_us) * 1e-6);
  }
  decisions_[static_cast<size_t>(outcome.decision) - 1]->Increment();
  for (const pipelines::StageRef& stage : outcome.degraded_stages) {
    if (Counter* c = degraded_.at(static_cast<size_t>(stage.index))) c->Increment();
  }
  for (const pipelines::StageRef& stage : outcome.skipped_stages) {
    if (Counter* c = skipped_.at(static_cast<size_t>(stage.index))) c->Increment();
  }
  if (recent_ != nullptr) {
    recent_->Add(outcome, std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
  }
}

Caller InProcessCaller() {
  Caller caller;
  caller.address = "in-process";
  caller.is_operator = caller.may_use_llm_api = caller.may_send_card_tokens = true;
  return caller;
}

TxScoreHandler::TxScoreHandler(const ActivePipeline* active, std::function<bool()> ready, ClaimsJobManager* jobs,
                               Caller caller, ActionRecorder record_action, ShardRouter* router)
    : active_(active),
      jobs_(jobs),
      ready_(std::move(ready)),
      caller_(std::move(caller)),
      record_action_(std::move(record_action)),
      router_(router) {}

const ShardEndpoint* TxScoreHandler::RouteCard(const pipelines::ScoringPipeline& pipeline, fraud::RawTransaction* raw,
                                               const rpc::Transaction& transaction) const {
  const bool forwarded = transaction.__isset.forwarded_by;
  const bool older_tokens = !raw->older_card_tokens.empty();
  if (router_ == nullptr) {
    if (!forwarded && !older_tokens) return nullptr;
    throw ToInvalidRequest(InvalidArgument("this server is not sharded: only a sharded replica forwards transactions",
                                           forwarded ? "forwarded_by" : "older_card_tokens"));
  }
  if ((forwarded || older_tokens) && !router_->IsPeer(caller_)) {
    throw ToInvalidRequest(InvalidArgument(
        caller_.Describe() + " is not a shard peer (sharding.peer_identities): it may not forward transactions",
        forwarded ? "forwarded_by" : "older_card_tokens"));
  }
  if (older_tokens && !forwarded) {
    throw ToInvalidRequest(InvalidArgument("older_card_tokens goes with forwarded_by", "older_card_tokens"));
  }
  if (Status tokenized = pipeline.TokenizeCard(raw); !tokenized.ok()) throw ToInvalidRequest(tokenized.error());
  // Routed by the token the card's state is stored under (service/shard_map.h).
  const ShardEndpoint& owner = router_->map().OwnerOf(*raw->card_token);
  if (owner.name == router_->map().self().name) return nullptr;
  if (forwarded) {
    // Never forwarded twice: two replicas whose shard lists differ would pass it around.
    rpc::ShardUnavailable unavailable;
    unavailable.shard = owner.name;
    unavailable.reason = "shard " + transaction.forwarded_by + " forwarded a card that, by the shard list of " +
                         router_->map().self().name + ", shard " + owner.name + " owns: " + kShardListsDiffer;
    throw unavailable;
  }
  return &owner;
}

std::optional<rpc::ScoreResult> TxScoreHandler::ForwardOrPrepare(const ActivePipeline::Version& version,
                                                                 fraud::RawTransaction* raw,
                                                                 const rpc::Transaction& transaction) {
  // A card token lets its sender act on that card's history: only identities given the right
  // send one (a shard peer forwards tokenized transactions: RouteCard checks it is a peer).
  if (transaction.__isset.card_token && !transaction.__isset.forwarded_by && !caller_.may_send_card_tokens) {
    throw ToInvalidRequest(InvalidArgument(
        caller_.Describe() + " may not send card_token (security.tls.card_token_clients): send card_number",
        "card_token"));
  }
  raw->caller = caller_.Describe();
  if (const ShardEndpoint* owner = RouteCard(*version.pipeline, raw, transaction)) {
    rpc::Transaction forwarded = ToThriftTransaction(*raw);  // tokenized: no card number
    forwarded.__set_forwarded_by(router_->map().self().name);
    forwarded.__set_forwarded_for(raw->caller);
    return router_->Forward(*owner, forwarded);
  }
  // Forwarded by a peer (RouteCard checked it is one): the caller it served, then the peer.
  if (transaction.__isset.forwarded_by) {
    raw->caller = (transaction.__isset.forwarded_for ? transaction.forwarded_for : "an unnamed caller") + " via " +
                  caller_.Describe();
  }
  return std::nullopt;
}

rpc::ScoreResult TxScoreHandler::Answer(const ActivePipeline::Version& version,
                                        Result<pipelines::ScoreOutcome> outcome) {
  if (!outcome.ok()) {
    if (outcome.error().code == ErrorCode::kInvalidArgument) throw ToInvalidRequest(outcome.error());
    throw ToServiceError(outcome.error());
  }
  version.metrics->RecordOutcome(*outcome);
  return ToThrift(*outcome);
}

rpc::ScoreResult TxScoreHandler::ScoreOne(const ActivePipeline::Version& version, fraud::RawTransaction raw,
                                          const rpc::Transaction& transaction) {
  if (std::optional<rpc::ScoreResult> forwarded = ForwardOrPrepare(version, &raw, transaction)) return *forwarded;
  return Answer(version, version.pipeline->Score(std::move(raw)));
}

namespace {

// Counts a score() call by how it ended: `error` null for an answer.
void CountScoreCall(ScoringMetrics& metrics, const std::exception_ptr& error,
                    std::chrono::steady_clock::time_point start) {
  ScoringMetrics::RequestOutcome outcome = ScoringMetrics::RequestOutcome::kOk;
  if (error != nullptr) {
    try {
      std::rethrow_exception(error);
    } catch (const rpc::InvalidRequest&) {
      outcome = ScoringMetrics::RequestOutcome::kInvalid;
    } catch (...) {
      outcome = ScoringMetrics::RequestOutcome::kError;
    }
  }
  metrics.RecordRequest(ScoringMetrics::Method::kScore, outcome, SecondsSince(start));
}

}  // namespace

void TxScoreHandler::score(rpc::ScoreResult& result, const rpc::Transaction& transaction) {
  const auto start = std::chrono::steady_clock::now();
  const std::shared_ptr<const ActivePipeline::Version> version = active_->Get();  // one version, start to end
  try {
    result = ScoreOne(*version, TakeFromThrift(transaction), transaction);
  } catch (const apache::thrift::TException&) {  // InvalidRequest, ServiceError, ShardUnavailable
    CountScoreCall(*version->metrics, std::current_exception(), start);
    throw;
  }
  CountScoreCall(*version->metrics, nullptr, start);
}

void TxScoreHandler::ScoreThen(const rpc::Transaction& transaction, std::function<void(const rpc::ScoreResult&)> answer,
                               std::function<void(std::exception_ptr)> fail) {
  const auto start = std::chrono::steady_clock::now();
  // One version, start to end; held until the answer, so its pipeline outlives the request.
  std::shared_ptr<const ActivePipeline::Version> version = active_->Get();
  // Answers with what `produce` returns, or fails with what it throws; counted either way.
  auto finish = [version, start, answer = std::move(answer),
                 fail = std::move(fail)](const std::function<rpc::ScoreResult()>& produce) {
    rpc::ScoreResult result;
    try {
      result = produce();
    } catch (...) {
      CountScoreCall(*version->metrics, std::current_exception(), start);
      return fail(std::current_exception());
    }
    CountScoreCall(*version->metrics, nullptr, start);
    answer(result);
  };
  fraud::RawTransaction raw;
  std::optional<rpc::ScoreResult> forwarded;
  try {
    raw = TakeFromThrift(transaction);
    forwarded = ForwardOrPrepare(*version, &raw, transaction);
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    return finish([&error]() -> rpc::ScoreResult { std::rethrow_exception(error); });
  }
  if (forwarded) return finish([&forwarded] { return std::move(*forwarded); });
  // The pipeline answers every request once (its failures too); this catches what escapes
  // before it has taken the request.
  auto answered = std::make_shared<std::atomic<bool>>(false);
  auto pass_on = std::make_shared<decltype(finish)>(std::move(finish));
  try {
    version->pipeline->ScoreThen(std::move(raw), [version, answered, pass_on](Result<pipelines::ScoreOutcome> outcome) {
      answered->store(true);
      (*pass_on)([&] { return Answer(*version, std::move(outcome)); });
    });
  } catch (const std::exception& e) {
    if (answered->load()) {
      Log("thrift").error("an error after score() was answered: {}", e.what());
      return;
    }
    const std::exception_ptr error = std::current_exception();
    (*pass_on)([&error]() -> rpc::ScoreResult { std::rethrow_exception(error); });
  }
}

void TxScoreHandler::scoreBatch(std::vector<rpc::BatchItem>& results,
                                const std::vector<rpc::Transaction>& transactions) {
  const auto start = std::chrono::steady_clock::now();
  results.clear();
  results.reserve(transactions.size());
  bool any_error = false, any_invalid = false;
  const std::shared_ptr<const ActivePipeline::Version> version = active_->Get();  // the whole batch on one version
  ScoringMetrics* const metrics = version->metrics.get();
  for (const rpc::Transaction& transaction : transactions) {
    rpc::BatchItem item;
    try {
      item.__set_result(ScoreOne(*version, TakeFromThrift(transaction), transaction));
    } catch (const rpc::InvalidRequest& invalid) {
      any_invalid = true;
      item.__set_error(invalid);
    } catch (const rpc::ServiceError& failure) {
      any_error = true;  // logged by the pipeline
      item.__set_service_error(failure);
    } catch (const rpc::ShardUnavailable& unavailable) {
      any_error = true;
      item.__set_unavailable(unavailable);
    }
    results.push_back(std::move(item));
  }
  const ScoringMetrics::RequestOutcome batch_outcome = any_error     ? ScoringMetrics::RequestOutcome::kError
                                                       : any_invalid ? ScoringMetrics::RequestOutcome::kInvalid
                                                                     : ScoringMetrics::RequestOutcome::kOk;
  metrics->RecordRequest(ScoringMetrics::Method::kScoreBatch, batch_outcome, SecondsSince(start));
}

void TxScoreHandler::health(rpc::HealthStatus& status) {
  status.live = true;
  status.ready = ready_();
  const std::shared_ptr<const ActivePipeline::Version> version = active_->Get();
  status.model_id = version->pipeline->model_id();
  status.model_version = version->pipeline->model_version();
  status.pipeline_version = version->pipeline->config().version;
}

namespace {

rpc::ClaimsJobStatus ToThrift(const ClaimsJobView& view) {
  rpc::ClaimsJobStatus status;
  status.job_id = view.job_id;
  status.state = static_cast<rpc::JobState::type>(view.state);
  status.done = view.done;
  status.total = view.total;
  status.errors = view.errors;
  status.output_path = view.output_path;
  if (!view.detail.empty()) status.__set_detail(view.detail);
  if (view.claims_per_s > 0) status.__set_claims_per_s(view.claims_per_s);
  status.__set_llm_selected(view.llm_selected);
  status.__set_llm_shortfalls(view.llm_shortfalls);
  return status;
}

// The status of a job call, or the Thrift exception for its error.
rpc::ClaimsJobStatus JobStatusOrThrow(const Result<ClaimsJobView>& view, const std::string& job_id) {
  if (view.ok()) return ToThrift(*view);
  if (view.error().code == ErrorCode::kInvalidArgument) throw ToInvalidRequest(view.error());
  if (view.error().code == ErrorCode::kNotFound) {
    rpc::UnknownJob unknown;
    unknown.job_id = RedactCardNumbersIn(job_id);  // the caller's text, echoed: a card number never is
    throw unknown;
  }
  throw ToServiceError(view.error());
}

}  // namespace

ClaimsJobManager& TxScoreHandler::Jobs() const {
  if (jobs_ == nullptr) {
    throw ToServiceError(
        FailedPrecondition("this server runs no claims jobs: add a jobs section (claims_pipeline, "
                           "input_dir, output_dir) to its settings file"));
  }
  return *jobs_;
}

void TxScoreHandler::Record(const std::string& action, const std::string& target, const std::string& outcome,
                            const std::string& detail) const {
  if (!record_action_) return;
  storage::AuditAction entry;
  entry.time_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  entry.action = action;
  entry.caller = caller_.Describe();
  entry.target = target;
  entry.outcome = outcome;
  entry.detail = detail;
  record_action_(entry);
}

void TxScoreHandler::RequireOperator(const std::string& action, const std::string& target) const {
  if (caller_.is_operator) return;
  const std::string reason = caller_.identity + " is not an operator (security.tls.operators): only operators may " +
                             (action == "submit_claims_job"   ? "submit claims jobs"
                              : action == "cancel_claims_job" ? "cancel claims jobs"
                                                              : "read a claims job's status");
  Record(action, target, "denied", reason);
  rpc::AccessDenied denied;
  denied.reason = reason;
  throw denied;
}

void TxScoreHandler::submitClaimsJob(rpc::ClaimsJobStatus& status, const rpc::ClaimsJobRequest& request) {
  const std::string target =
      request.__isset.input_path ? request.input_path : std::to_string(request.claims.size()) + " claims sent inline";
  RequireOperator("submit_claims_job", target);
  ClaimsJobManager& jobs = Jobs();
  if (request.__isset.input_path == request.__isset.claims) {
    throw ToInvalidRequest(InvalidArgument("set exactly one of input_path and claims", "input_path"));
  }
  Result<ClaimsJobView> submitted = [&] {
    if (request.__isset.input_path) return jobs.SubmitFile(request.input_path, request.restart);
    std::vector<fraud::RawClaim> claims;
    claims.reserve(request.claims.size());
    for (const rpc::Claim& c : request.claims) claims.push_back(FromThriftClaim(c));
    return jobs.SubmitClaims(claims, request.restart);
  }();
  if (submitted.ok()) {
    Record("submit_claims_job", target, "applied", "job " + submitted->job_id + (request.restart ? " (restart)" : ""));
  } else {
    Record("submit_claims_job", target, "refused", submitted.error().ToString());
  }
  status = JobStatusOrThrow(submitted, "");
}

void TxScoreHandler::claimsJobStatus(rpc::ClaimsJobStatus& status, const std::string& job_id) {
  RequireOperator("claims_job_status", job_id);  // a job's status names its files
  status = JobStatusOrThrow(Jobs().Status(job_id), job_id);
}

void TxScoreHandler::cancelClaimsJob(rpc::ClaimsJobStatus& status, const std::string& job_id) {
  RequireOperator("cancel_claims_job", job_id);
  Result<ClaimsJobView> cancelled = Jobs().Cancel(job_id);
  Record("cancel_claims_job", job_id, cancelled.ok() ? "applied" : "refused",
         cancelled.ok() ? "" : cancelled.error().ToString());
  status = JobStatusOrThrow(cancelled, job_id);
}

AsyncTxScoreHandler::AsyncTxScoreHandler(std::shared_ptr<TxScoreHandler> handler)
    : AnsweredInline(handler), handler_(std::move(handler)) {}

void AsyncTxScoreHandler::score(std::function<void(const rpc::ScoreResult&)> cob,
                                std::function<void(apache::thrift::TDelayedException*)> exn_cob,
                                const rpc::Transaction& transaction) {
  handler_->ScoreThen(transaction, std::move(cob),
                      [exn_cob = std::move(exn_cob)](std::exception_ptr error) { exn_cob(Delayed(std::move(error))); });
}

}  // namespace txscore::service
