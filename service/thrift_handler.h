// The Thrift service: converts wire types to the pipeline's and back, counts outcomes.
//
// This is the boundary where txscore Errors become Thrift exceptions: InvalidRequest (field,
// reason) for bad input, ServiceError for failures on our side.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gen-cpp/TxScore.h"
#include "pipelines/scoring_pipeline.h"
#include "service/claims_jobs.h"
#include "service/metrics.h"
#include "service/recent_decisions.h"
#include "service/shard_router.h"
#include "service/thrift_async.h"
#include "service/tls.h"
#include "storage/audit_log.h"

namespace txscore::service {

// Converts a wire Transaction to the pipeline's input; the PAN is copied only into the
// returned struct, which the pipeline wipes.
fraud::RawTransaction FromThrift(const rpc::Transaction& t);
// The same, then wipes `t`'s card number and verification code. For the handler, whose
// argument the generated processor owns (const only in the signature).
fraud::RawTransaction TakeFromThrift(const rpc::Transaction& t);
rpc::ScoreResult ToThrift(const pipelines::ScoreOutcome& outcome);

// Metrics of the scoring service, registered once per pipeline version. Every series a request
// touches is found by index (method, outcome, decision, timing slot, graph index), never by name.
class ScoringMetrics {
 public:
  enum class Method { kScore, kScoreBatch };
  enum class RequestOutcome { kOk, kInvalid, kError };

  // `recent`: where each outcome is kept for the dashboard (null: nowhere).
  ScoringMetrics(MetricsRegistry* registry, const pipelines::ScoringPipeline& pipeline,
                 RecentDecisions* recent = nullptr);
  void RecordRequest(Method method, RequestOutcome outcome, double seconds);
  void RecordOutcome(const pipelines::ScoreOutcome& outcome);

 private:
  static constexpr size_t kMethods = 2, kRequestOutcomes = 3, kDecisions = 3;
  // Filled in the constructor and only read afterwards, so reads need no lock.
  std::array<std::array<Counter*, kRequestOutcomes>, kMethods> requests_{};
  std::array<Histogram*, kMethods> request_seconds_{};
  std::vector<Histogram*> stage_seconds_;         // by StageTiming::slot
  std::array<Counter*, kDecisions> decisions_{};  // by Decision - 1
  // By graph index; null for a required stage (it never goes without).
  std::vector<Counter*> degraded_, skipped_;
  RecentDecisions* recent_ = nullptr;
};

// The transaction pipeline requests run on now, with its metrics. A reload replaces it whole
// (service/scoring_server.h); a request takes one version and keeps it to its end, so it runs
// entirely on the old pipeline or entirely on the new, and the old one is freed when its last
// request finishes. Thread-safe.
class ActivePipeline {
 public:
  struct Version {
    std::shared_ptr<pipelines::ScoringPipeline> pipeline;
    std::shared_ptr<ScoringMetrics> metrics;
  };
  std::shared_ptr<const Version> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  void Set(std::shared_ptr<const Version> version) {
    std::lock_guard<std::mutex> lock(mu_);
    current_.swap(version);  // the old one is released below, outside the lock
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Version> current_;
};

// Writes an operator action to the audit trail. Thread-safe.
using ActionRecorder = std::function<void(const storage::AuditAction& action)>;

// A caller inside the process (tests, tools): no identity, may operate.
Caller InProcessCaller();

// One per connection: it knows who the caller is (service/tls.h).
class TxScoreHandler : public rpc::TxScoreIf {
 public:
  // `active` and `jobs` must outlive the handler. `ready` is read by health(). `jobs` is null
  // when the server runs no claims jobs (no jobs section). Submitting and cancelling jobs needs
  // `caller` to be an operator; each attempt, allowed or not, goes to `record_action` (none:
  // not recorded).
  // `router`: on a sharded server (sharding: in the settings), a transaction for another shard's
  // card is tokenized here and forwarded to its owner (service/shard_router.h); null: this
  // server owns every card.
  // `ready`: what health() answers as `ready` (serving, and the database taking writes).
  TxScoreHandler(const ActivePipeline* active, std::function<bool()> ready, ClaimsJobManager* jobs = nullptr,
                 Caller caller = InProcessCaller(), ActionRecorder record_action = nullptr,
                 ShardRouter* router = nullptr);

  void score(rpc::ScoreResult& result, const rpc::Transaction& transaction) override;
  // score() without a thread waiting for the LLM stage (pipelines::ScoringPipeline::ScoreThen):
  // calls `answer` with the result or `fail` with what score() would throw, once, here or
  // later on the thread that finishes the request. A transaction forwarded to another shard
  // is answered here (the forwarding call waits).
  void ScoreThen(const rpc::Transaction& transaction, std::function<void(const rpc::ScoreResult&)> answer,
                 std::function<void(std::exception_ptr)> fail);
  void scoreBatch(std::vector<rpc::BatchItem>& results, const std::vector<rpc::Transaction>& transactions) override;
  void health(rpc::HealthStatus& status) override;
  void submitClaimsJob(rpc::ClaimsJobStatus& status, const rpc::ClaimsJobRequest& request) override;
  void claimsJobStatus(rpc::ClaimsJobStatus& status, const std::string& job_id) override;
  void cancelClaimsJob(rpc::ClaimsJobStatus& status, const std::string& job_id) override;

 private:
  // The job manager, or a ServiceError saying how to enable jobs.
  ClaimsJobManager& Jobs() const;
  // Throws AccessDenied (and records the attempt) unless the caller is an operator.
  void RequireOperator(const std::string& action, const std::string& target) const;
  void Record(const std::string& action, const std::string& target, const std::string& outcome,
              const std::string& detail) const;

  // Scores `raw` here, or forwards it to its card's shard; throws the service's exceptions.
  rpc::ScoreResult ScoreOne(const ActivePipeline::Version& version, fraud::RawTransaction raw,
                            const rpc::Transaction& transaction);
  // Checks the caller's rights on `raw` and routes it: the owner's answer when another shard
  // owns the card (forwarded), else nullopt with `raw` ready for this server's pipeline.
  // Throws the service's exceptions.
  std::optional<rpc::ScoreResult> ForwardOrPrepare(const ActivePipeline::Version& version, fraud::RawTransaction* raw,
                                                   const rpc::Transaction& transaction);
  // The pipeline's answer as score() gives it (counted in the version's metrics), or the
  // service's exception.
  static rpc::ScoreResult Answer(const ActivePipeline::Version& version, Result<pipelines::ScoreOutcome> outcome);
  // On a sharded server, the shard owning the card (tokenizing the PAN in `raw`); null when it
  // is this one.
  const ShardEndpoint* RouteCard(const pipelines::ScoringPipeline& pipeline, fraud::RawTransaction* raw,
                                 const rpc::Transaction& transaction) const;

  const ActivePipeline* active_;
  ClaimsJobManager* jobs_;
  const std::function<bool()> ready_;
  const Caller caller_;
  const ActionRecorder record_action_;
  ShardRouter* const router_;
};

// TxScoreHandler through Thrift's asynchronous processor (service/thrift_async.h): score()
// answers when the request is done, holding no thread while the LLM writes a REVIEW's findings;
// the other methods answer at once.
class AsyncTxScoreHandler : public AnsweredInline {
 public:
  explicit AsyncTxScoreHandler(std::shared_ptr<TxScoreHandler> handler);
  void score(std::function<void(const rpc::ScoreResult&)> cob,
             std::function<void(apache::thrift::TDelayedException*)> exn_cob,
             const rpc::Transaction& transaction) override;

 private:
  std::shared_ptr<TxScoreHandler> handler_;
};

}  // namespace txscore::service
