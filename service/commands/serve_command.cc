// txscore serve --config SETTINGS: the scoring service, until SIGINT or SIGTERM; SIGHUP reloads
// the pipeline (service/scoring_server.h).
#include <pthread.h>

#include <csignal>
#include <iostream>

#include "accelerator/discovery.h"
#include "common/core_dumps.h"
#include "common/logging.h"
#include "llm/decoder.h"
#include "pipelines/config.h"
#include "pipelines/placement.h"
#include "service/commands/commands.h"
#include "service/commands/pipeline_setup.h"
#include "service/scoring_server.h"

namespace txscore::service {
namespace {

pthread_t g_signal_thread;

// Threads started before RunServe could block the signals (OpenBLAS starts its workers when
// the library loads, before main) do not block them, and the kernel may hand a process's
// SIGTERM to one of them: without a handler, that would kill the process on the spot, with no
// drain. The handler passes the signal on to the thread that waits for it (it blocks them, so
// the signal stays pending until its sigwait). pthread_kill is async-signal-safe.
void ForwardToSignalThread(int signal_number) { pthread_kill(g_signal_thread, signal_number); }

struct ServeOptions {
  std::string config_path = "config/txscore.yaml";
  // Default: JSON lines at info (common/logging.h): a service's logs go to a collector.
  LoggingOptions logging{.level = "info", .format = LogFormat::kJson};
  // Default: sharding.self from the settings. A StatefulSet passes its pod's name.
  std::string shard_name;
};

int RunServe(const ServeOptions& options) {
  ConfigureLogging(options.logging);
  // Block the signals before txscore starts a thread, so that only sigwait below takes them;
  // any thread that does not block them forwards them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  g_signal_thread = pthread_self();
  struct sigaction forward {};
  forward.sa_handler = ForwardToSignalThread;
  sigemptyset(&forward.sa_mask);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) sigaction(signal_number, &forward, nullptr);

  Result<LoadedPipeline> loaded = LoadPipelineAndDevices(options.config_path);
  if (!loaded.ok()) {
    Log("server").error("{}", loaded.error().ToString());
    return 1;
  }
  if (!options.shard_name.empty()) {
    if (loaded->settings.sharding.shards.empty()) {
      Log("server").error("--shard-name {} needs a sharding section in {} (docs/scaling-out.md)", options.shard_name,
                          options.config_path);
      return 1;
    }
    loaded->settings.sharding.self = options.shard_name;
  }
  const ServiceSettings& settings = loaded->settings;
  // Before any key is loaded: no core dump may hold them (security.allow_core_dumps).
  if (Status hardened = KeepSecretsOutOfCoreDumps(settings.security.allow_core_dumps); !hardened.ok()) {
    Log("server").error("{}", hardened.error().ToString());
    return 1;
  }
  const pipelines::PipelineConfig* config = &loaded->config;
  for (const accelerator::AbsentDevice& absent : loaded->devices->absent()) {
    Log("device").info("device {}: absent ({})", absent.kind, absent.reason);
  }
  const pipelines::PipelineRuntime runtime = loaded->Runtime();
  Result<std::unique_ptr<ScoringServer>> server = ScoringServer::Create(settings, *config, runtime);
  if (!server.ok()) {
    Log("server").error("cannot start: {}", server.error().ToString());
    if (server.error().code == ErrorCode::kNotFound) {
      Log("server").error("run ./scripts/setup.sh to create the demo key and model");
    }
    return 1;
  }
  (*server)->Start([] { kill(getpid(), SIGTERM); });
  {
    // Held for the start-up log only: a reload must be able to free this pipeline.
    const std::shared_ptr<pipelines::ScoringPipeline> serving = (*server)->pipeline();
    const pipelines::ScoringPipeline& pipeline = *serving;
    Log("pipeline")
        .info("pipeline {} v{}: model {}@{}", config->name, config->version, pipeline.model_id(),
              pipeline.model_version());
    for (int i : config->graph.order()) {
      const pipelines::GraphStage& stage = config->graph.stage(i);
      Log("pipeline")
          .info("stage {} ({}){}: {}", stage.name, stage.kind, stage.when ? " when " + stage.when->text() : "",
                pipeline.stage(i).Describe());
    }
    for (const accelerator::Placement& p : pipeline.plan().stages) {
      Log("pipeline")
          .info("stage {} on {}{} ({}): {}", p.stage, p.device, p.emulated ? " (emulated)" : "",
                accelerator::DtypeName(p.dtype), p.reason);
    }
  }
  if (!settings.jobs.claims_pipeline.empty()) {
    Log("claims").info(
        "claims jobs: pipeline {}, inputs from {}, outputs to {}, priority {} (txscore job submit --help)",
        settings.jobs.claims_pipeline, settings.jobs.input_dir, settings.jobs.output_dir,
        PriorityName(settings.jobs.priority));
  }
  Log("server").info(
      "serving Thrift{} on {}:{} ({} workers, {} I/O threads, up to {} connections); admin on "
      "{}://{}:{}/ (healthz, readyz, metrics; POST admin/reload by an operator, or SIGHUP, reloads the pipeline)",
      settings.server.plaintext ? " (plaintext)" : " over mutual TLS", settings.server.host, (*server)->rpc_port(),
      settings.server.workers, settings.server.io_threads, settings.server.max_connections,
      settings.admin.plaintext ? "http" : "https", settings.admin.host, (*server)->admin_port());
  Log("server").info(
      "try it: ./build/txscore score --server 127.0.0.1:{}{}", (*server)->rpc_port(),
      settings.server.plaintext ? " --plaintext" : " (client certificate from --tls-dir, var/pki/client)");
  // One machine-readable line for scripts and tests that asked for port 0.
  if ((*server)->probe_port() != 0) {
    Log("server").info("health probes on http://127.0.0.1:{}/ (healthz, readyz, v2/health/live, v2/health/ready)",
                       (*server)->probe_port());
  }
  std::cout << "listening thrift_port=" << (*server)->rpc_port() << " admin_port=" << (*server)->admin_port();
  if ((*server)->probe_port() != 0) std::cout << " probe_port=" << (*server)->probe_port();
  std::cout << std::endl;

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) == 0 && signal_number == SIGHUP) {
    Log("server").info("received SIGHUP; reloading {} and the pipeline it names", settings.source_path);
    (*server)->Reload("SIGHUP", "signal SIGHUP");  // logs what happened, and audits it
  }
  Log("server").info("received {}; finishing in-flight requests", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Stop();
  if (!(*server)->stop_status().ok()) {
    Log("server").error("stopped, but closing the database failed: {}", (*server)->stop_status().error().ToString());
    return 1;
  }
  Log("server").info("stopped cleanly");
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve fraud scores over Thrift, with health and metrics over HTTP");
  cmd->add_option("--config", options->config_path, "Service settings file (it names the pipeline file)")
      ->capture_default_str();
  cmd->add_option("--shard-name", options->shard_name,
                  "This replica's shard among sharding.shards (default: sharding.self)");
  AddLoggingOptions(cmd, &options->logging);
  cmd->callback([options, exit_code] { *exit_code = RunServe(*options); });
}

void AddLoggingOptions(CLI::App* cmd, LoggingOptions* options) {
  cmd->add_option("--log-level", options->level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--log-format",
         [options](const std::string& name) { options->format = ParseLogFormat(name).value_or(LogFormat::kText); },
         std::string("json (one JSON object per line) or text; default ") +
             (options->format == LogFormat::kJson ? "json" : "text"))
      ->check(CLI::IsMember({"json", "text"}));
}

}  // namespace txscore::service
