#include "service/scoring_server.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/logging.h"
#include "common/sha256.h"
#include "pipelines/forensic_stage.h"
#include "service/build_info.h"
#include "service/dashboard.h"
#include "service/inference_protocol.h"
#include "service/process_metrics.h"
#include "service/shard_transfer.h"

namespace txscore::service {
namespace {

// The TLS context both ports serve with, or null when both say plaintext.
Result<std::shared_ptr<const TlsServerContext>> LoadTls(const ServiceSettings& settings) {
  if (settings.server.plaintext && settings.admin.plaintext) return std::shared_ptr<const TlsServerContext>();
  const std::string& file = settings.source_path;
  if (!settings.security.tls) {
    return InvalidArgument(file +
                           ": security.tls is missing: both ports serve TLS with client certificates unless "
                           "server.plaintext and admin.plaintext say true (scripts/make-demo-pki.sh makes a demo CA "
                           "and certificates; docs/settings.md)");
  }
  const TlsConfig& tls = *settings.security.tls;
  if (!settings.server.plaintext && tls.thrift_clients.empty()) {
    return InvalidArgument(file +
                           ": security.tls.thrift_clients is missing: name the client identities the Thrift "
                           "port admits (their certificates' SAN DNS names, or URIs under uri_identity_prefixes)");
  }
  if (!settings.admin.plaintext && tls.admin_clients.empty()) {
    return InvalidArgument(file +
                           ": security.tls.admin_clients is missing: name the client identities the admin "
                           "port admits (their certificates' SAN DNS names, or URIs under uri_identity_prefixes)");
  }
  Result<std::shared_ptr<const TlsServerContext>> context = TlsServerContext::Create(tls);
  if (!context.ok()) return InvalidArgument(file + ": security.tls: " + context.error().message);
  return context;
}

void WarnAboutPlaintext(const ServiceSettings& settings) {
  if (settings.server.plaintext) {
    Log("server").warn(
        "server.plaintext is true: the Thrift port {}:{} serves without TLS. Card numbers cross the network in clear "
        "and callers are not authenticated (any of them may score by card token; only loopback callers may run "
        "claims jobs). Use this on a trusted network or for tests only.",
        settings.server.host, settings.server.port);
  }
  if (settings.admin.plaintext) {
    Log("server").warn(
        "admin.plaintext is true: the admin port {}:{} serves plain HTTP with no caller identity; only loopback "
        "callers may reload.",
        settings.admin.host, settings.admin.port);
  }
}

// The probe port (admin.probe_port): a probe sends its request as it connects and is answered at
// once, so few connections and a short wait for the request are enough.
constexpr int kProbeConnections = 16;
constexpr std::chrono::milliseconds kProbeRequestTimeout{2000};

int64_t MicrosNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::unique_ptr<ScoringServer>> ScoringServer::Create(const ServiceSettings& settings,
                                                             const pipelines::PipelineConfig& config,
                                                             const pipelines::PipelineRuntime& given_runtime,
                                                             const Hooks& runtime_hooks) {
  // The server's pipelines share what their kinds allow (one LLM engine on an accelerator).
  pipelines::PipelineRuntime runtime = given_runtime;
  if (runtime.shared == nullptr) runtime.shared = std::make_shared<pipelines::SharedStageResources>();
  std::unique_ptr<ScoringServer> server(new ScoringServer());
  TXSCORE_ASSIGN_OR_RETURN(const std::shared_ptr<const TlsServerContext> tls, LoadTls(settings));
  WarnAboutPlaintext(settings);
  // The admin port answers first, so /healthz and /readyz (503 "starting") are there while
  // the database and models load.
  ScoringServer* self = server.get();
  std::map<std::string, AdminRoute> routes;
  routes["/healthz"] = [] { return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}; };
  routes["/readyz"] = [self] { return self->Readiness(); };
  AddInferenceProtocolRoutes({.ready = [self] { return self->Readiness().status == 200; },
                              .pipeline = [self]() -> std::shared_ptr<pipelines::ScoringPipeline> {
                                const std::shared_ptr<const ActivePipeline::Version> version = self->active_.Get();
                                return version ? version->pipeline : nullptr;
                              }},
                             &routes);
  routes["/metrics"] = [self] {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", self->registry_.RenderPrometheus()};
  };
  // Operators only (their certificate's identity; over plaintext, loopback callers); each
  // attempt, denied ones too, is in the audit trail.
  AdminRoute reload([self](const Caller& caller) { return self->ReloadOverHttp(caller); });
  reload.post = reload.slow = true;
  reload.right = RouteRight::kOperator;
  reload.on_denied = [self](const Caller& caller) {
    storage::AuditAction denied;
    denied.time_us = MicrosNow();
    denied.action = "reload";
    denied.caller = caller.Describe();
    denied.target = self->settings_path_;
    denied.outcome = "denied";
    denied.detail = "not an operator";
    self->RecordAction(denied);
  };
  routes["/admin/reload"] = std::move(reload);
  // The OpenAI-compatible API, served by the LLM stages of the pipeline in force.
  server->openai_ = std::make_unique<OpenAiApi>(
      [self]() -> std::shared_ptr<pipelines::ScoringPipeline> {
        std::shared_ptr<const ActivePipeline::Version> version = self->active_.Get();
        return version ? version->pipeline : nullptr;
      },
      &server->registry_);
  server->openai_->AddRoutes(&routes);
  // The dashboard. Jobs are read only once Create has finished (phase no longer starting):
  // the job manager is made after the admin port starts answering.
  AddDashboardRoutes({.pipeline = [self]() -> std::shared_ptr<pipelines::ScoringPipeline> {
                        std::shared_ptr<const ActivePipeline::Version> version = self->active_.Get();
                        return version ? version->pipeline : nullptr;
                      },
                      .metrics = &server->registry_,
                      .decisions = &server->recent_decisions_,
                      .phase = [self] { return std::string(PhaseName(self->phase_.load())); },
                      .reload_history = [self] { return self->ReloadHistoryJson(); },
                      .jobs =
                          [self] {
                            nlohmann::json jobs = nlohmann::json::array();
                            if (self->phase_.load() == Phase::kStarting || self->jobs_ == nullptr) return jobs;
                            for (const ClaimsJobView& job : self->jobs_->Snapshot()) {
                              jobs.push_back({{"job_id", job.job_id},
                                              {"state", JobStateName(job.state)},
                                              {"done", job.done},
                                              {"total", job.total},
                                              {"errors", job.errors},
                                              {"claims_per_s", job.claims_per_s},
                                              {"detail", job.detail}});
                            }
                            return jobs;
                          },
                      .shard = [self]() -> nlohmann::json {
                        // Set during Create, read only once it has finished (phase no longer starting).
                        if (self->phase_.load() == Phase::kStarting || self->router_ == nullptr) return nullptr;
                        const ShardMap& map = self->router_->map();
                        nlohmann::json open = nlohmann::json::array();
                        for (const ShardEndpoint& shard : map.shards()) {
                          if (shard.name != map.self().name && self->router_->CircuitOpen(shard.name)) {
                            open.push_back(shard.name);
                          }
                        }
                        return {{"self", map.self().name}, {"shards", map.names()}, {"circuit_open", open}};
                      }},
                     &routes);
  server->settings_path_ = settings.source_path;
  // Refused authentications on either port are recorded in the audit trail once it is open
  // (Start); until then they wait in the recorder's queue.
  server->refusals_ = std::make_unique<RefusalRecorder>(
      [self](const storage::AuditAction& action) { return self->audit_log().CommitAction(action); });
  const TlsRefusalObserver on_refused = [recorder = server->refusals_.get()](TlsPort port, const std::string& address,
                                                                             TlsRefusal refusal,
                                                                             const std::string& detail) {
    recorder->Refused(port, address, refusal, detail);
  };
  // The probe port: the health routes alone, on loopback, over plain HTTP (nothing there is
  // secret or changes anything), with connections of its own.
  std::map<std::string, AdminRoute> probe_routes;
  for (const char* path : {"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"}) {
    probe_routes[path] = routes.at(path);
  }
  Result<std::unique_ptr<AdminServer>> admin = AdminServer::Create(
      settings.admin, std::move(routes), settings.admin.plaintext ? nullptr : tls, AdminLimits{}, on_refused);
  if (!admin.ok()) return admin.error();
  server->admin_ = std::move(admin).value();
  if (settings.admin.probe_port) {
    AdminConfig probe;
    probe.host = "127.0.0.1";
    probe.port = *settings.admin.probe_port;
    probe.plaintext = true;
    AdminLimits probe_limits;
    probe_limits.max_connections = kProbeConnections;
    probe_limits.request_timeout = kProbeRequestTimeout;
    Result<std::unique_ptr<AdminServer>> probes =
        AdminServer::Create(probe, std::move(probe_routes), nullptr, probe_limits);
    if (!probes.ok()) {
      Error e = probes.error();
      e.message = "admin.probe_port: " + e.message;
      return e;
    }
    server->probes_ = std::move(probes).value();
    server->probes_->Start();
  }
  server->admin_->Start();
  server->hooks_ = runtime_hooks;
  if (runtime_hooks.on_starting) runtime_hooks.on_starting(server->admin_->port());

  storage::DatabaseOptions db_options;
  db_options.durability = settings.storage.durability;
  db_options.write_faults = runtime_hooks.write_faults;
  if (runtime_hooks.resume_every_ms) db_options.resume_every_ms = *runtime_hooks.resume_every_ms;
  Result<std::unique_ptr<storage::Database>> db = storage::Database::Open(settings.storage.path, db_options);
  if (!db.ok()) return db.error();
  server->db_ = std::move(db).value();
  // A shard set's replica routes cards to their shards, and starts only on its own database
  // (service/shard_transfer.h).
  if (!settings.sharding.shards.empty()) {
    TXSCORE_ASSIGN_OR_RETURN(server->router_, ShardRouter::Create(settings.sharding, &server->registry_));
  }
  TXSCORE_RETURN_IF_ERROR(
      CheckShardStamp(settings.storage.path, *server->db_, server->router_ ? &server->router_->map() : nullptr));
  TXSCORE_ASSIGN_OR_RETURN(
      server->ledger_, pipelines::ScoringLedger::Create(
                           server->db_.get(), settings.security.key_file(), settings.security.kek(),
                           storage::AuditLog::Options{static_cast<uint64_t>(settings.storage.audit_checkpoint_every)},
                           settings.security.key_form()));
  pipelines::PipelineConfig pinned = config;  // the settings' pin, as each reload applies it
  pinned.pinned_digest = settings.pipeline_digest;
  pinned.pinned_in = settings.source_path;
  TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<pipelines::ScoringPipeline> pipeline,
                           pipelines::ScoringPipeline::Create(pinned, server->ledger_, runtime));
  server->settings_ = std::make_shared<const ServiceSettings>(settings);
  server->stop_delay_ms_ = settings.server.stop_delay_ms;
  server->runtime_ = runtime;
  server->active_.Set(server->Serve(std::move(pipeline)));
  server->reloads_applied_ =
      server->registry_.AddCounter("txscore_reloads_total", "Pipeline reloads, by outcome.", {{"outcome", "applied"}});
  server->reloads_refused_ =
      server->registry_.AddCounter("txscore_reloads_total", "Pipeline reloads, by outcome.", {{"outcome", "refused"}});
  ScoringServer* const counters = server.get();
  const struct {
    const char* name;
    const char* help;
    uint64_t PrepareSnapshot::*field;
  } kPrepareCounters[] = {
      {"txscore_request_path_model_builds_total", "Models built after serving started (prepare once: stays 0).",
       &PrepareSnapshot::model_builds},
      {"txscore_request_path_graph_builds_total",
       "Decoding constraints compiled after serving started (prepare once: stays 0).", &PrepareSnapshot::graph_builds},
      {"txscore_request_path_weight_bytes_moved_total",
       "Weight bytes moved to a device after serving started (prepare once: stays 0).",
       &PrepareSnapshot::weight_bytes_moved},
  };
  for (const auto& c : kPrepareCounters) {
    server->registry_.AddCounterFunction(c.name, c.help, {},
                                         [counters, field = c.field] { return counters->RequestPathWork().*field; });
  }
  // Group commit at work: decisions per database write, and WAL syncs per write (durability sync).
  server->registry_.AddCounterFunction("txscore_audit_entries_total",
                                       "Audit trail entries written: decisions, operator actions, checkpoints.", {},
                                       [counters] { return counters->audit_log().stats().entries; });
  server->registry_.AddCounterFunction("txscore_audit_writes_total",
                                       "Database writes of the audit trail (one per commit group).", {},
                                       [counters] { return counters->audit_log().stats().writes; });
  server->registry_.AddCounterFunction("txscore_wal_syncs_total",
                                       "Write-ahead-log syncs (fsync/fdatasync) since start (durability sync).", {},
                                       [counters] { return counters->db_ ? counters->db_->WalSyncs() : 0; });

  if (!settings.jobs.claims_pipeline.empty()) {
    Result<pipelines::PipelineConfig> claims = pipelines::LoadPipelineConfig(
        settings.jobs.claims_pipeline, runtime.kinds != nullptr ? *runtime.kinds : pipelines::BuiltinStageKinds());
    if (!claims.ok()) return claims.error();
    claims->pinned_digest = settings.jobs.claims_pipeline_digest;
    claims->pinned_in = settings.source_path;
    claims->pinned_by = "jobs.claims_pipeline_digest";
    TXSCORE_ASSIGN_OR_RETURN(server->claims_pipeline_digest_, Sha256HexOfFile(settings.jobs.claims_pipeline));
    // The claims pipeline may share the transaction pipeline's engines (an LLM on an
    // accelerator: one engine, one batcher, requests first); each kind decides (its Prepare).
    pipelines::PipelineRuntime background = runtime;
    background.background =
        settings.jobs.priority == JobsConfig::Priority::kIdle;  // the jobs' threads leave the cores to requests
    Result<std::unique_ptr<pipelines::ClaimsPipeline>> claims_pipeline = pipelines::ClaimsPipeline::Create(
        *claims, settings.security.key_file(), background, settings.security.kek(), settings.security.key_form());
    if (!claims_pipeline.ok()) return claims_pipeline.error();
    server->claims_pipeline_ = std::move(claims_pipeline).value();
    ClaimsJobManagerOptions job_options;
    job_options.config = settings.jobs;
    job_options.before_job = runtime_hooks.before_job;
    job_options.on_stopping = runtime_hooks.on_jobs_stopping;
    job_options.after_progress = runtime_hooks.after_job_progress;
    Result<std::unique_ptr<ClaimsJobManager>> jobs =
        ClaimsJobManager::Create(server->claims_pipeline_.get(), server->db_.get(), std::move(job_options));
    if (!jobs.ok()) return jobs.error();
    server->jobs_ = std::move(jobs).value();
  }
  server->AddOperatorMetrics();
  // One handler per connection, knowing its caller (job control is for operators).
  RpcHandlerFactory handlers = [self](const Caller& caller) -> std::shared_ptr<rpc::TxScoreCobSvIf> {
    return std::make_shared<AsyncTxScoreHandler>(std::make_shared<TxScoreHandler>(
        &self->active_, [self] { return self->ready_.load() && !self->db_->write_health().stopped; }, self->jobs_.get(),
        caller, [self](const storage::AuditAction& action) { self->RecordAction(action); }, self->router_.get()));
  };
  Result<std::unique_ptr<RpcServer>> rpc =
      RpcServer::Create(settings.server, std::move(handlers), settings.server.plaintext ? nullptr : tls, on_refused);
  if (!rpc.ok()) return rpc.error();
  server->rpc_ = std::move(rpc).value();
  RpcServer* const rpc_server = server->rpc_.get();
  server->registry_.AddGaugeFunction("txscore_rpc_connections_open", "Thrift connections open now.", {},
                                     [rpc_server] { return rpc_server->stats().connections_open; });
  server->registry_.AddGaugeFunction("txscore_rpc_connections_idle",
                                     "Thrift connections open now and waiting for a frame (evicted first when full).",
                                     {}, [rpc_server] { return rpc_server->stats().connections_idle; });
  server->registry_.AddGaugeFunction("txscore_rpc_requests_queued", "Complete requests waiting for a worker now.", {},
                                     [rpc_server] { return rpc_server->stats().requests_queued; });
  server->registry_.AddGaugeFunction(
      "txscore_rpc_requests_waiting",
      "Requests waiting for a slow stage (the LLM) now, their worker given back (server.waiting_threads).", {},
      [rpc_server] { return rpc_server->stats().requests_waiting; });
  server->registry_.AddGaugeFunction("txscore_rpc_handshakes_in_progress",
                                     "TLS handshakes in progress on the Thrift port now (server.max_handshakes).", {},
                                     [rpc_server] { return rpc_server->stats().handshakes_in_progress; });
  const struct {
    const char* name;
    const char* help;
    uint64_t RpcServerStats::*field;
  } kRpcCounters[] = {
      {"txscore_rpc_connections_accepted_total", "Thrift connections accepted (refused ones included).",
       &RpcServerStats::connections_accepted},
      {"txscore_rpc_connections_refused_total",
       "Thrift connections closed at once: server.max_connections open and none of them idle.",
       &RpcServerStats::connections_refused},
      {"txscore_rpc_idle_evictions_total",
       "Idle Thrift connections closed to make room for a new one (server.max_connections open).",
       &RpcServerStats::idle_evictions},
      {"txscore_rpc_frame_timeouts_total",
       "Thrift connections closed because a frame or a reply took over server.frame_timeout_ms.",
       &RpcServerStats::frame_timeouts},
      {"txscore_rpc_idle_timeouts_total", "Thrift connections closed after server.idle_timeout_ms of silence.",
       &RpcServerStats::idle_timeouts},
      {"txscore_rpc_requests_shed_total",
       "Requests answered 'overloaded' because server.max_queued_requests were waiting.",
       &RpcServerStats::requests_shed},
      {"txscore_rpc_slow_stage_waits_refused_total",
       "Slow stages (the LLM) skipped because server.waiting_threads requests were already waiting for one: the "
       "request was answered without its findings rather than hold a worker.",
       &RpcServerStats::waits_refused},
      {"txscore_rpc_handshakes_evicted_total",
       "Thrift connections closed in their TLS handshake, the oldest, to make room: server.max_handshakes were in "
       "progress.",
       &RpcServerStats::handshakes_evicted},
      {"txscore_rpc_protocol_errors_total",
       "Thrift connections closed for a bad frame or message (size, limits, malformed).",
       &RpcServerStats::protocol_errors},
  };
  for (const auto& c : kRpcCounters) {
    server->registry_.AddCounterFunction(c.name, c.help, {},
                                         [rpc_server, field = c.field] { return rpc_server->stats().*field; });
  }
  AdminServer* const admin_server = server->admin_.get();
  for (size_t i = 0; i < kTlsRefusalCount; ++i) {
    const auto refusal = static_cast<TlsRefusal>(i);
    const char* help = "Clients refused during or right after the TLS handshake, by port and reason.";
    if (rpc_server->uses_tls()) {
      server->registry_.AddCounterFunction("txscore_tls_refusals_total", help,
                                           {{"port", "thrift"}, {"reason", TlsRefusalName(refusal)}},
                                           [rpc_server, i] { return rpc_server->stats().tls_refusals[i]; });
    }
    if (admin_server->uses_tls()) {
      server->registry_.AddCounterFunction("txscore_tls_refusals_total", help,
                                           {{"port", "admin"}, {"reason", TlsRefusalName(refusal)}},
                                           [admin_server, refusal] { return admin_server->tls_refusals(refusal); });
    }
  }
  server->registry_.AddCounterFunction("txscore_admin_bad_requests_total",
                                       "Admin requests that could not be read whole, answered and closed: malformed "
                                       "(400), or headers, body or request over the limits (431, 413).",
                                       {}, [admin_server] { return admin_server->bad_requests(); });
  server->registry_.AddCounterFunction(
      "txscore_admin_connections_refused_total",
      "Admin connections closed as soon as accepted: the most allowed (256) were open.", {},
      [admin_server] { return admin_server->connections_refused(); });
  server->registry_.AddGaugeFunction("txscore_admin_connections_open", "Admin connections open now (at most 256).", {},
                                     [admin_server] { return admin_server->connections_open(); });
  server->registry_.AddCounterFunction(
      "txscore_admin_handshakes_evicted_total",
      "Admin connections still in their TLS handshake closed to make room for a new one (the most allowed were "
      "open).",
      {}, [admin_server] { return admin_server->handshakes_evicted(); });

  return server;
}

ScoringServer::~ScoringServer() { Stop(); }

const char* ScoringServer::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return "starting";
    case Phase::kServing:
      return "serving";
    case Phase::kDraining:
      return "draining";
    case Phase::kStopped:
      return "stopped";
  }
  return "unknown";
}

void ScoringServer::AddOperatorMetrics() {
  const BuildInfo& build = ThisBuild();
  registry_.SetInfo("txscore_build_info", "The txscore binary: version, the commit it was built from, its compiler.",
                    {{"version", build.version}, {"commit", build.commit}, {"compiler", build.compiler}});
  AddProcessMetrics(&registry_);
  // RocksDB: what each column family holds, and whether its background work failed. Read at
  // each scrape; the admin port stops before the database closes.
  ScoringServer* const self = this;
  for (storage::ColumnFamily cf :
       {storage::ColumnFamily::kEntityState, storage::ColumnFamily::kAudit, storage::ColumnFamily::kJobs}) {
    const Labels labels = {{"column_family", storage::ColumnFamilyName(cf)}};
    const struct {
      const char* name;
      const char* help;
      uint64_t storage::Database::ColumnFamilyStats::*field;
    } kStats[] = {
        {"txscore_rocksdb_estimated_keys", "Keys in the column family (RocksDB's estimate).",
         &storage::Database::ColumnFamilyStats::estimated_keys},
        {"txscore_rocksdb_sst_bytes", "Bytes of the column family's table files.",
         &storage::Database::ColumnFamilyStats::sst_bytes},
        {"txscore_rocksdb_memtable_bytes", "Bytes of the column family's memtables.",
         &storage::Database::ColumnFamilyStats::memtable_bytes},
        {"txscore_rocksdb_pending_compaction_bytes", "Bytes RocksDB estimates compaction has yet to rewrite.",
         &storage::Database::ColumnFamilyStats::pending_compaction_bytes},
    };
    for (const auto& stat : kStats) {
      registry_.AddGaugeFunction(stat.name, stat.help, labels, [self, cf, field = stat.field] {
        const std::optional<storage::Database::ColumnFamilyStats> stats = self->db_->Stats(cf);
        return stats ? static_cast<double>((*stats).*field) : 0.0;
      });
    }
  }
  registry_.AddCounterFunction("txscore_rocksdb_background_errors_total",
                               "RocksDB flushes and compactions that failed (writes stop after one).", {},
                               [self] { return self->db_->BackgroundErrors(); });
  // A write that failed for the disk (full, or an I/O error) stops writes until they resume.
  registry_.AddGaugeFunction("txscore_database_writes_stopped",
                             "1 while the database takes no writes (a full disk or an I/O error); /readyz says why.",
                             {}, [self] { return self->db_->write_health().stopped ? 1.0 : 0.0; });
  registry_.AddCounterFunction("txscore_database_write_stops_total",
                               "Times the database stopped taking writes (a full disk or an I/O error).", {},
                               [self] { return self->db_->write_health().stops; });
  registry_.AddCounterFunction("txscore_database_write_recoveries_total",
                               "Times the database took writes again after they stopped.", {},
                               [self] { return self->db_->write_health().recoveries; });
  registry_.AddCounterFunction("txscore_database_reopens_total",
                               "Times the database was closed and opened again in the process to take writes again.",
                               {}, [self] { return self->db_->write_health().reopens; });
  if (jobs_ == nullptr) return;
  // Claims jobs: how many are in each state, and the running one's progress.
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kCancelled,
                         JobState::kFailed, JobState::kInterrupted, JobState::kDegraded}) {
    registry_.AddGaugeFunction("txscore_claims_jobs", "Claims jobs submitted since start, by state.",
                               {{"state", JobStateName(state)}}, [self, state] {
                                 double n = 0;
                                 for (const ClaimsJobView& job : self->jobs_->Snapshot()) n += job.state == state;
                                 return n;
                               });
  }
  const auto running = [self](double (*value)(const ClaimsJobView&)) {
    return [self, value] {
      for (const ClaimsJobView& job : self->jobs_->Snapshot()) {
        if (job.state == JobState::kRunning) return value(job);
      }
      return 0.0;
    };
  };
  registry_.AddGaugeFunction("txscore_claims_job_running_claims_done",
                             "Claims the running job has done (0: none runs).", {},
                             running([](const ClaimsJobView& j) { return static_cast<double>(j.done); }));
  registry_.AddGaugeFunction("txscore_claims_job_running_claims_in_input", "Claims in the running job's input.", {},
                             running([](const ClaimsJobView& j) { return static_cast<double>(j.total); }));
  registry_.AddGaugeFunction("txscore_claims_job_running_claims_per_second", "The running job's claims per second.", {},
                             running([](const ClaimsJobView& j) { return j.claims_per_s; }));
}

HttpResponse ScoringServer::Readiness() const {
  // Members are touched only while serving: Create is still filling them in before, and Stop
  // stops this port before releasing them.
  const Phase phase = phase_.load();
  nlohmann::json body = {{"phase", PhaseName(phase)}, {"ready", false}};
  if (phase == Phase::kServing) {
    const Status database = db_->CheckHealth();
    const Status audit = ledger_->audit_log().Health();
    const bool listening = rpc_->serving();
    body["database"] = database.ok() ? "open" : database.error().message;
    if (!audit.ok()) body["audit"] = audit.error().message;
    body["listener"] = listening ? "serving" : "not serving";
    const std::shared_ptr<pipelines::ScoringPipeline> pipeline = active_.Get()->pipeline;
    body["model"] = pipeline->model_id() + "@" + pipeline->model_version();
    // Every stage's model, shadows included: what a reload replaced, stage by stage.
    nlohmann::json models = nlohmann::json::object();
    for (size_t i = 0; i < pipeline->config().graph.size(); ++i) {
      const int index = static_cast<int>(i);
      if (const std::optional<pipelines::ModelVersion> m = pipeline->stage(index).model()) {
        models[pipeline->config().graph.stage(index).name] = m->id + "@" + m->version;
      }
    }
    body["models"] = models;
    body["pipeline_version"] = pipeline->config().version;
    const std::vector<ReloadOutcome> reloads = reload_history();
    if (!reloads.empty()) {
      const ReloadOutcome& last = reloads.back();
      body["last_reload"] = {
          {"applied", last.applied}, {"trigger", last.trigger}, {"time_ms", last.time_ms}, {"detail", last.detail}};
    }
    body["ready"] = database.ok() && audit.ok() && listening;
  }
  return HttpResponse{body["ready"].get<bool>() ? 200 : 503, "application/json", body.dump() + "\n"};
}

void ScoringServer::Start(std::function<void()> on_unexpected_stop) {
  {
    std::lock_guard<std::mutex> lock(prepared_mutex_);
    prepared_ = PrepareCountersNow();
  }
  rpc_thread_ = std::thread([this, on_unexpected_stop = std::move(on_unexpected_stop)] {
    rpc_->Serve();
    if (!stopping_.load() && on_unexpected_stop) on_unexpected_stop();
  });
  while (!rpc_->serving()) std::this_thread::yield();  // ready means the listener is being served
  phase_ = Phase::kServing;
  ready_ = true;
  refusals_->Open();
}

PrepareSnapshot ScoringServer::RequestPathWork() const {
  std::lock_guard<std::mutex> lock(prepared_mutex_);
  if (!ready_.load() && !stopping_.load()) return PrepareSnapshot();  // not serving yet
  return PrepareCountersNow() - prepared_;
}

void ScoringServer::Stop() {
  if (stopping_.exchange(true)) return;
  ready_ = false;
  phase_ = Phase::kDraining;
  if (hooks_.on_draining) hooks_.on_draining();
  if (rpc_thread_.joinable()) {
    if (stop_delay_ms_ > 0) {
      // Readiness is off: a load balancer polling /readyz moves its traffic away meanwhile.
      Log("server").info(
          "stopping: readiness is off; serving {} ms more (server.stop_delay_ms) before the listener closes",
          stop_delay_ms_);
      std::this_thread::sleep_for(std::chrono::milliseconds(stop_delay_ms_));
    }
    const auto drain_start = std::chrono::steady_clock::now();
    rpc_->Stop();
    rpc_thread_.join();
    Log("server").info(
        "stopping: the Thrift listener closed and its connections drained in {} ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - drain_start).count());
  }
  if (admin_) admin_->Stop();
  if (probes_) probes_->Stop();
  if (refusals_) refusals_->Close();  // the ports are closed: write what they refused, before the trail's end
  jobs_.reset();                      // a running job stops after its chunk in flight, resumable
  claims_pipeline_.reset();
  active_.Set(nullptr);
  if (db_) {
    // Nothing writes any more: sign the trail's end, so the next start links a clean shutdown.
    Status audit_closed = ledger_ ? audit_log().Close() : Status::Ok();
    if (!audit_closed.ok()) {
      Log("audit").error("cannot write the shutdown checkpoint: {}", audit_closed.error().ToString());
    }
    stop_status_ = db_->Close();
    if (stop_status_.ok()) stop_status_ = audit_closed;  // every write has returned: close RocksDB, and say how it went
    db_.reset();
  }
  phase_ = Phase::kStopped;
}

std::shared_ptr<const ActivePipeline::Version> ScoringServer::Serve(
    std::shared_ptr<pipelines::ScoringPipeline> pipeline) {
  auto version = std::make_shared<ActivePipeline::Version>();
  version->metrics = std::make_shared<ScoringMetrics>(&registry_, *pipeline, &recent_decisions_);
  // Read through the active pipeline at each scrape: the stage's engine is the one serving.
  const pipelines::StageGraph& graph = pipeline->config().graph;
  for (size_t i = 0; i < graph.size(); ++i) {
    const std::string& name = graph.stage(static_cast<int>(i)).name;
    if (!pipeline->stage(static_cast<int>(i)).device_fallbacks()) continue;  // a stage that runs on one device only
    registry_.AddCounterFunction(
        "txscore_device_fallbacks_total",
        "Requests of a stage that moved to its next device because one failed (since the pipeline was loaded).",
        {{"stage", name}}, [this, name] {
          const std::shared_ptr<const ActivePipeline::Version> serving = active_.Get();
          const pipelines::PreparedStage* stage = serving ? serving->pipeline->FindStage(name) : nullptr;
          return stage != nullptr && stage->device_fallbacks() ? *stage->device_fallbacks() : uint64_t{0};
        });
  }
  // What each stage publishes (pipelines/stage_kind.h, StageServices), read at each scrape
  // from the stage serving under its name then.
  for (size_t i = 0; i < graph.size(); ++i) {
    const std::string& name = graph.stage(static_cast<int>(i)).name;
    for (pipelines::StageMetric& metric : pipeline->stage(static_cast<int>(i)).Serves().metrics) {
      auto read = [this, name, read_stage = std::move(metric.read)] {
        const std::shared_ptr<const ActivePipeline::Version> serving = active_.Get();
        const pipelines::PreparedStage* stage = serving ? serving->pipeline->FindStage(name) : nullptr;
        return stage != nullptr ? read_stage(*stage) : 0.0;
      };
      if (metric.type == pipelines::StageMetric::Type::kCounter) {
        registry_.AddCounterFunction(metric.name, metric.help, metric.labels,
                                     [read = std::move(read)] { return static_cast<uint64_t>(read()); });
      } else {
        registry_.AddGaugeFunction(metric.name, metric.help, metric.labels, std::move(read));
      }
    }
  }
  version->pipeline = std::move(pipeline);
  return version;
}

void ScoringServer::RecordAction(const storage::AuditAction& action) {
  // The target is the caller's text: a job id (16 hex digits, left whole) or anything else (a
  // file name) by the free-text rule, stricter than the logger's, which leaves runs inside words
  // shaped as the tokens txscore makes; the audit trail's encoder does the same in the record.
  const bool job_id =
      action.target.size() == 16 && action.target.find_first_not_of("0123456789abcdef") == std::string::npos;
  Log("admin").info("operator action: {} by {} on {}: {}{}{}", action.action, action.caller,
                    job_id ? action.target : RedactCardNumbersIn(action.target), action.outcome,
                    action.detail.empty() ? "" : ": ", action.detail);
  // The database is open from Create's end until Stop has stopped both ports.
  const Phase phase = phase_.load();
  if (phase != Phase::kServing && phase != Phase::kDraining) {
    Log("audit").error("the {} by {} is not recorded: the database is not open yet", action.action, action.caller);
    return;
  }
  Status written = audit_log().CommitAction(action);
  if (!written.ok()) {
    Log("audit").error("cannot record the {} by {}: {}", action.action, action.caller, written.error().ToString());
  }
}

ScoringServer::ReloadOutcome ScoringServer::Reload(const std::string& trigger, const std::string& caller) {
  ReloadOutcome outcome = TryReload(trigger);
  if (claims_pipeline_ != nullptr && !outcome.busy) {
    // Reloads replace the transaction pipeline only: a job runs start to end on one claims
    // pipeline, and jobs may be running now.
    const std::string& path = claims_pipeline_->config().source_path;
    Result<std::string> digest = Sha256HexOfFile(path);
    if (!digest.ok() || *digest != claims_pipeline_digest_) {
      outcome.detail += "; note: jobs.claims_pipeline " + path +
                        " has changed since start-up, and claims jobs keep the pipeline they loaded then until a "
                        "restart";
    }
  }
  outcome.time_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::shared_ptr<pipelines::ScoringPipeline> serving = active_.Get()->pipeline;
  outcome.pipeline_version = serving->config().version;
  outcome.model_id = serving->model_id();
  outcome.model_version = serving->model_version();
  (outcome.applied ? reloads_applied_ : reloads_refused_)->Increment();
  if (outcome.applied) {
    Log("reload").info("reload ({}): applied: {}", trigger, outcome.detail);
  } else {
    Log("reload").error("reload ({}): refused, the running pipeline keeps serving: {}", trigger, outcome.detail);
  }
  storage::AuditAction action;
  action.time_us = MicrosNow();
  action.action = "reload";
  action.caller = caller.empty() ? trigger : caller;
  action.target = settings_path_;
  action.outcome = outcome.applied ? "applied" : "refused";
  action.detail = outcome.detail;
  RecordAction(action);
  std::lock_guard<std::mutex> lock(history_mutex_);
  history_.push_back(outcome);
  if (history_.size() > kReloadHistory) history_.erase(history_.begin());
  return outcome;
}

ScoringServer::ReloadOutcome ScoringServer::TryReload(const std::string& trigger) {
  ReloadOutcome outcome;
  outcome.trigger = trigger;
  std::unique_lock<std::mutex> one_at_a_time(reload_mutex_, std::try_to_lock);
  if (!one_at_a_time.owns_lock()) {
    outcome.busy = true;
    outcome.detail = "another reload is running";
    return outcome;
  }
  const PrepareSnapshot before = PrepareCountersNow();
  Result<ServiceSettings> settings = LoadServiceSettings(settings_->source_path);
  if (!settings.ok()) {
    outcome.detail = settings.error().ToString();
    return outcome;
  }
  // This process's shard name is fixed at start (sharding.self, or `serve --shard-name`).
  settings->sharding.self = settings_->sharding.self;
  const std::vector<std::string> changes = RestartOnlyChanges(*settings_, *settings);
  if (!changes.empty()) {
    std::string list;
    for (const std::string& c : changes) list += (list.empty() ? "" : "; ") + c;
    outcome.detail = "these settings change only with a restart: " + list;
    return outcome;
  }
  // Certificates, keys and allowlists are read again: files rotated on disk take effect now.
  Result<std::shared_ptr<const TlsServerContext>> tls = LoadTls(*settings);
  if (!tls.ok()) {
    outcome.detail = tls.error().ToString();
    return outcome;
  }
  // The card keys too: a rotated keyset (txscore keys rotate) tokenizes new traffic from now on.
  Result<std::unique_ptr<fraud::CardTokenizer>> keys = fraud::CardTokenizer::FromKeyFile(
      settings->security.key_file(), settings->security.kek(), settings->security.key_form());
  if (!keys.ok()) {
    outcome.detail = keys.error().ToString();
    return outcome;
  }
  if (Status successor = fraud::CheckSuccessor(ledger_->tokenizer()->keyset(), (*keys)->keyset()); !successor.ok()) {
    outcome.detail = settings->security.key_file() + ": " + successor.error().message;
    return outcome;
  }
  Result<pipelines::PipelineConfig> loaded = pipelines::LoadPipelineConfig(
      settings->pipeline, runtime_.kinds != nullptr ? *runtime_.kinds : pipelines::BuiltinStageKinds());
  if (!loaded.ok()) {
    outcome.detail = loaded.error().ToString();
    return outcome;
  }
  loaded->pinned_digest = settings->pipeline_digest;
  loaded->pinned_in = settings->source_path;
  // The new pipeline loads its own engines (a checkpoint may have changed in place); claims
  // jobs keep sharing the ones they started with.
  pipelines::PipelineRuntime runtime = runtime_;
  runtime.shared = std::make_shared<pipelines::SharedStageResources>();
  Result<std::unique_ptr<pipelines::ScoringPipeline>> created =
      pipelines::ScoringPipeline::Create(*loaded, ledger_, runtime);
  if (!created.ok()) {
    outcome.detail = created.error().ToString();
    return outcome;
  }
  std::shared_ptr<pipelines::ScoringPipeline> pipeline = std::move(created).value();
  if (Status canary = pipeline->Canary(); !canary.ok()) {
    outcome.detail = canary.error().ToString();
    return outcome;
  }
  ledger_->SetTokenizer(std::move(keys).value());
  active_.Set(Serve(pipeline));
  rpc_->SetTls(*tls);
  admin_->SetTls(*tls);
  settings_ = std::make_shared<const ServiceSettings>(std::move(settings).value());
  const pipelines::PipelineConfig& config = pipeline->config();
  {
    // Building the new set was a start-up's work, not the request path's: it is left out of
    // the request-path counters (which then still count what requests did meanwhile).
    std::lock_guard<std::mutex> lock(prepared_mutex_);
    prepared_ = prepared_ + (PrepareCountersNow() - before);
  }
  outcome.applied = true;
  outcome.detail = "pipeline " + config.name + " version " + config.version + " (" + config.source_path + "), model " +
                   pipeline->model_id() + "@" + pipeline->model_version() + ", " + std::to_string(config.graph.size()) +
                   " stages, files " + pipeline->bundle().digest;
  return outcome;
}

std::vector<ScoringServer::ReloadOutcome> ScoringServer::reload_history() const {
  std::lock_guard<std::mutex> lock(history_mutex_);
  return history_;
}

nlohmann::json ScoringServer::ReloadHistoryJson() const {
  nlohmann::json list = nlohmann::json::array();
  for (const ReloadOutcome& reload : reload_history()) {
    list.push_back({{"time_ms", reload.time_ms},
                    {"trigger", reload.trigger},
                    {"applied", reload.applied},
                    {"detail", reload.detail},
                    {"pipeline_version", reload.pipeline_version},
                    {"model", reload.model_id + "@" + reload.model_version}});
  }
  return list;
}

HttpResponse ScoringServer::ReloadOverHttp(const Caller& caller) {
  if (phase_.load() != Phase::kServing) {
    return {503, "application/json", "{\"error\": \"not serving\"}\n"};
  }
  const ReloadOutcome outcome = Reload("admin", caller.Describe());
  nlohmann::json body = {{"applied", outcome.applied},
                         {"detail", outcome.detail},
                         {"pipeline_version", outcome.pipeline_version},
                         {"model", outcome.model_id + "@" + outcome.model_version}};
  const int status = outcome.applied ? 200 : outcome.busy ? 409 : 422;
  return {status, "application/json", body.dump() + "\n"};
}

}  // namespace txscore::service
