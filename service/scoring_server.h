// The whole scoring service in one object: database, pipeline, metrics, the Thrift server
// and the HTTP admin server, wired together. `txscore serve` and the integration tests
// both run exactly this.
//
// Hot reload: Reload() (SIGHUP in `txscore serve`, or POST /admin/reload from an operator)
// reads the settings file and the pipeline file it names again, and loads the new pipeline, models, schemas and
// checkpoints beside the running ones; checks them (every stage prepared, a canary transaction scored without writing
// anything); then swaps them in atomically (ActivePipeline). Every request runs entirely on the old or entirely on the
// new pipeline; the old is freed when its last request finishes. A bad new set (a missing file, a wrong feature count,
// a YAML error, a failing canary) or a change to a restart-only setting (any but `pipeline:`: named in the refusal) is
// refused, and the old keeps serving. Claims jobs keep the claims pipeline they started with until the server restarts.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/prepare_counters.h"
#include "common/result.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "service/admin_server.h"
#include "service/claims_jobs.h"
#include "service/metrics.h"
#include "service/openai_api.h"
#include "service/recent_decisions.h"
#include "service/refusal_records.h"
#include "service/rpc_server.h"
#include "service/settings.h"
#include "service/shard_router.h"
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
    std::function<void(const std::string& job_id, int64_t done)> after_job_progress;
    // Called during Create once the admin port answers (/readyz: 503 "starting"), before the
    // database and models are opened.
    std::function<void(int admin_port)> on_starting;
    // Called by Stop() once readiness is off ("draining"), before requests are drained.
    std::function<void()> on_draining;
    // Faults injected into the database's file writes (a full disk), and how often (ms) recovery
    // is tried while writes are stopped (default: storage::DatabaseOptions'). Tests.
    std::shared_ptr<storage::WriteFaults> write_faults;
    std::optional<int> resume_every_ms;
  };
  // `pipeline`: the transactions pipeline the settings name (loaded by the caller, who sized
  // the devices for it).
  static Result<std::unique_ptr<ScoringServer>> Create(const ServiceSettings& settings,
                                                       const pipelines::PipelineConfig& pipeline,
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
  // admin.probe_port's listener (the health routes on loopback); 0 when the settings name none.
  int probe_port() const { return probes_ ? probes_->port() : 0; }
  bool ready() const { return ready_.load(); }
  // What /readyz reports: starting (Create running), serving (after Start), draining (Stop
  // running), stopped.
  enum class Phase { kStarting, kServing, kDraining, kStopped };
  static const char* PhaseName(Phase phase);
  // The transaction pipeline serving now (replaced by a reload).
  std::shared_ptr<pipelines::ScoringPipeline> pipeline() const { return active_.Get()->pipeline; }
  storage::AuditLog& audit_log() { return ledger_->audit_log(); }

  struct ReloadOutcome {
    bool applied = false;
    bool busy = false;    // refused because another reload was running
    std::string trigger;  // "SIGHUP", "admin", or the test's
    int64_t time_ms = 0;  // when it finished, ms since the epoch
    // Applied: what now serves; refused: why (a reload already running, a restart-only
    // setting, or the error that made the new set unusable).
    std::string detail;
    std::string pipeline_version;  // serving after the reload (the old one's when refused)
    std::string model_id;
    std::string model_version;
  };
  // Thread-safe; one reload at a time (a second one meanwhile is refused at once). Blocks
  // until the new set is loaded and checked (seconds with an LLM checkpoint). The TLS
  // certificates, key and allowlists are read again too; new connections use them. Every
  // reload, applied or refused, is an operator action in the audit trail, by `caller`
  // (Caller::Describe) or, when empty, by `trigger`.
  ReloadOutcome Reload(const std::string& trigger, const std::string& caller = "");
  // The last reloads, oldest first (at most kReloadHistory).
  std::vector<ReloadOutcome> reload_history() const;
  nlohmann::json ReloadHistoryJson() const;  // the same, as the dashboard shows it
  static constexpr size_t kReloadHistory = 20;
  storage::Database& database() { return *db_; }
  // The record of refused authentications (its Flush: tests).
  RefusalRecorder& refusal_records() { return *refusals_; }
  MetricsRegistry& metrics() { return registry_; }
  // Start-up work (model and constraint builds, weight moves) done since Start(); stays zero
  // on a healthy request path (common/prepare_counters.h).
  PrepareSnapshot RequestPathWork() const;

 private:
  ScoringServer() = default;
  HttpResponse Readiness() const;  // the /readyz answer
  // Build, process, RocksDB and claims-job metrics (docs/operations.md), once the database and
  // the job manager exist.
  void AddOperatorMetrics();
  HttpResponse ReloadOverHttp(const Caller& caller);  // POST /admin/reload
  // Writes an operator action to the audit trail (logged too); failures are logged.
  void RecordAction(const storage::AuditAction& action);
  // Metrics for a pipeline about to serve (series shared across versions by name and labels).
  std::shared_ptr<const ActivePipeline::Version> Serve(std::shared_ptr<pipelines::ScoringPipeline> pipeline);
  ReloadOutcome TryReload(const std::string& trigger);

  std::unique_ptr<storage::Database> db_;
  std::shared_ptr<pipelines::ScoringLedger> ledger_;
  ActivePipeline active_;
  // The settings in force: loaded again by each reload (under reload_mutex_), replaced when it
  // applies (only `pipeline:` may have changed).
  std::shared_ptr<const ServiceSettings> settings_;
  int stop_delay_ms_ = 0;               // server.stop_delay_ms (restart-only)
  std::string settings_path_;           // the settings file (fixed at Create), the target of reload actions
  pipelines::PipelineRuntime runtime_;  // as given to Create
  std::mutex reload_mutex_;
  mutable std::mutex history_mutex_;
  std::vector<ReloadOutcome> history_;
  Counter* reloads_applied_ = nullptr;
  Counter* reloads_refused_ = nullptr;
  std::unique_ptr<pipelines::ClaimsPipeline> claims_pipeline_;  // with a jobs section
  // The SHA-256 of the claims pipeline file as loaded: a reload that finds it changed says
  // that claims jobs keep the loaded one until a restart.
  std::string claims_pipeline_digest_;
  std::unique_ptr<ClaimsJobManager> jobs_;
  MetricsRegistry registry_;
  std::unique_ptr<ShardRouter> router_;  // with a sharding section
  RecentDecisions recent_decisions_;     // for the dashboard, across reloads
  std::unique_ptr<OpenAiApi> openai_;    // its routes on admin_
  // Both ports' refused authentications, into the audit trail; outlives the ports that tell it.
  std::unique_ptr<RefusalRecorder> refusals_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<AdminServer> admin_;
  std::unique_ptr<AdminServer> probes_;  // admin.probe_port; null without one
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
