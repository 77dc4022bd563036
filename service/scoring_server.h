// The whole scoring service in one object: database, pipeline, metrics, the Thrift server
// and the HTTP admin server, wired together. `txscore serve` and the integration tests
// both run exactly this.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/prepare_counters.h"
#include "common/result.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "service/admin_server.h"
#include "service/claims_jobs.h"
#include "service/metrics.h"
#include "service/rpc_server.h"
#include "service/thrift_handler.h"
#include "storage/database.h"

namespace txscore::service {

class ScoringServer {
 public:
  // Opens the database, loads the key and models, binds both ports. Nothing is served yet.
  // `runtime` as for ScoringPipeline::Create.
  // Tests' hooks into the claims jobs (service/claims_jobs.h).
  struct Hooks {
    std::function<void(const std::string& job_id)> before_job;
    std::function<void()> on_jobs_stopping;
    // Called during Create once the admin port answers (/readyz: 503 "starting"), before the
    // database and models are opened.
    std::function<void(int admin_port)> on_starting;
    // Called by Stop() once readiness is off ("draining"), before requests are drained.
    std::function<void()> on_draining;
  };
  static Result<std::unique_ptr<ScoringServer>> Create(const pipelines::PipelineConfig& config,
                                                       const pipelines::PipelineRuntime& runtime = {},
                                                       const Hooks& runtime_hooks = {});
  ~ScoringServer();  // Stop()s if needed

  // Starts serving. `on_unexpected_stop` runs (on the server thread) if the Thrift server
  // ends without Stop() having been called.
  void Start(std::function<void()> on_unexpected_stop = nullptr);
  // Graceful: readiness off, stop accepting, let in-flight requests finish, stop the admin
  // port, close the database. Idempotent. stop_status() says whether the database closed cleanly.
  void Stop();
  const Status& stop_status() const { return stop_status_; }

  int rpc_port() const { return rpc_->port(); }
  RpcServerStats rpc_stats() const { return rpc_->stats(); }
  int admin_port() const { return admin_->port(); }
  bool ready() const { return ready_.load(); }
  // What /readyz reports: starting (Create running), serving (after Start), draining (Stop
  // running), stopped.
  enum class Phase { kStarting, kServing, kDraining, kStopped };
  static const char* PhaseName(Phase phase);
  pipelines::ScoringPipeline& pipeline() { return *pipeline_; }
  storage::Database& database() { return *db_; }
  MetricsRegistry& metrics() { return registry_; }
  // Start-up work (model and constraint builds, weight moves) done since Start(); stays zero
  // on a healthy request path (common/prepare_counters.h).
  PrepareSnapshot RequestPathWork() const;

 private:
  ScoringServer() = default;
  HttpResponse Readiness() const;  // the /readyz answer

  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<pipelines::ScoringPipeline> pipeline_;
  std::unique_ptr<pipelines::ClaimsPipeline> claims_pipeline_;  // with a jobs section
  std::unique_ptr<ClaimsJobManager> jobs_;
  MetricsRegistry registry_;
  std::unique_ptr<ScoringMetrics> metrics_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<AdminServer> admin_;
  std::thread rpc_thread_;
  std::atomic<bool> ready_{false};  // phase_ == kServing, for the health() RPC
  std::atomic<Phase> phase_{Phase::kStarting};
  Hooks hooks_;
  Status stop_status_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex prepared_mutex_;
  PrepareSnapshot prepared_;  // the counters when serving started
};

}  // namespace txscore::service
