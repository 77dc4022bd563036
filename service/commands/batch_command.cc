// txscore batch run --config SETTINGS --input FILE --output FILE [--shard I/N]: a claims job
// (pipelines/claims_job.h), resumable exactly once: run the same command again after a crash, a
// kill or Ctrl-C. txscore batch merge --output FILE SHARD_OUTPUTS...: the shards' outputs joined
// (pipelines/claims_merge.h).

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/core_dumps.h"
#include "common/logging.h"
#include "pipelines/claims_job.h"
#include "pipelines/claims_merge.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/config.h"
#include "pipelines/placement.h"
#include "service/commands/commands.h"
#include "service/commands/pipeline_setup.h"
#include "service/commands/progress.h"
#include "storage/database.h"

namespace txscore::service {
namespace {

struct BatchRunOptions {
  std::string config_path = "config/batch.yaml";
  LoggingOptions logging;  // Default: text at info; --quiet: warn
  pipelines::ClaimsJobOptions job;
  bool quiet = false;
  // Default: 0.1. More rows than this share becoming error lines (or none scored at all) makes
  // the run exit 3: the file is likely in the wrong shape.
  double max_error_share = 0.1;
  // Default: 0.1. When the LLM stage writes no findings for more than this share of the
  // claims it was asked to read, the run exits 4.
  double max_llm_shortfall_share = 0.1;
  // Default: none. An earlier run's output: only its rows whose LLM stage fell short are scored.
  std::string retry_llm_shortfalls;
  // Default: none, the whole input. "I/N" or "I/N:contiguous" (pipelines/claims_job.h).
  std::string shard;
};

struct BatchMergeOptions {
  std::vector<std::string> shard_outputs;
  std::string output;
  bool force = false;  // Default: an existing OUTPUT (or OUTPUT.summary.json) is refused
};

int RunMerge(const BatchMergeOptions& options) {
  Result<pipelines::ClaimsMergeSummary> merged =
      pipelines::MergeShardOutputs(options.shard_outputs, options.output, options.force);
  if (!merged.ok()) {
    std::fprintf(stderr, "txscore batch merge: %s; nothing was written\n", merged.error().message.c_str());
    return merged.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("merged %d shards: %lld lines (%lld errors)\noutput   %s\nsummary  %s.summary.json\n", merged->shards,
              static_cast<long long>(merged->lines), static_cast<long long>(merged->errors), options.output.c_str(),
              options.output.c_str());
  return 0;
}

std::atomic<bool> stop_requested{false};
extern "C" void RequestStop(int) { stop_requested.store(true); }

// The rows of an earlier output that list LLM shortfalls: line number -> claim_id.
Result<std::map<int64_t, std::string>> ShortfallLines(const std::string& earlier_output) {
  std::ifstream in(earlier_output);
  if (!in) return NotFound("cannot read " + earlier_output);
  std::map<int64_t, std::string> lines;
  int64_t number = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    const nlohmann::json row = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("line") || !row["line"].is_number_integer()) {
      return InvalidArgument(earlier_output + ":" + std::to_string(number) +
                             ": not a line of a txscore batch run output (a JSON object with \"line\")");
    }
    const auto shortfalls = row.find("llm_shortfalls");
    if (shortfalls != row.end() && shortfalls->is_array() && !shortfalls->empty()) {
      const auto claim_id = row.find("claim_id");
      if (claim_id == row.end() || !claim_id->is_string()) {
        return InvalidArgument(earlier_output + ":" + std::to_string(number) +
                               ": a row with llm_shortfalls has no claim_id");
      }
      lines[row["line"].get<int64_t>()] = claim_id->get<std::string>();
    }
  }
  return lines;
}

int RunBatch(BatchRunOptions& options) {
  if (options.quiet) options.logging.level = "warn";
  ConfigureLogging(options.logging);
  if (!options.retry_llm_shortfalls.empty()) {
    Result<std::map<int64_t, std::string>> lines = ShortfallLines(options.retry_llm_shortfalls);
    if (!lines.ok()) {
      Log("batch").error("--retry-llm-shortfalls: {}", lines.error().message);
      return 2;
    }
    if (lines->empty()) {
      std::printf("every claim of %s that the LLM stage was asked to read has its findings: nothing to score again\n",
                  options.retry_llm_shortfalls.c_str());
      return 0;
    }
    for (const auto& [line, claim_id] : *lines) options.job.only_lines.insert(line);
    options.job.expected_claim_ids = std::move(lines).value();
    Log("batch").info("scoring again the {} rows of {} whose LLM stage fell short", options.job.only_lines.size(),
                      options.retry_llm_shortfalls);
  }
  if (!options.shard.empty()) {
    Result<pipelines::ClaimsShard> shard = pipelines::ClaimsShard::Parse(options.shard);
    if (!shard.ok()) {
      Log("batch").error("{}", shard.error().message);
      return 2;
    }
    options.job.shard = *shard;
  }
  Result<LoadedPipeline> loaded = LoadPipelineAndDevices(options.config_path);
  if (!loaded.ok()) {
    Log("batch").error("{}", loaded.error().ToString());
    return 1;
  }
  const ServiceSettings& settings = loaded->settings;
  // Before any key is loaded: no core dump may hold them (security.allow_core_dumps).
  if (Status hardened = KeepSecretsOutOfCoreDumps(settings.security.allow_core_dumps); !hardened.ok()) {
    Log("batch").error("{}", hardened.error().ToString());
    return 1;
  }
  const pipelines::PipelineRuntime runtime = loaded->Runtime();
  Result<std::unique_ptr<pipelines::ClaimsPipeline>> pipeline = pipelines::ClaimsPipeline::Create(
      loaded->config, settings.security.key_file(), runtime, settings.security.kek(), settings.security.key_form());
  if (!pipeline.ok()) {
    Log("batch").error("cannot start: {}", pipeline.error().ToString());
    if (pipeline.error().code == ErrorCode::kNotFound)
      Log("batch").error("run ./scripts/setup.sh to create the demo key and models");
    return 1;
  }
  for (const accelerator::Placement& p : (*pipeline)->plan().stages) {
    Log("pipeline")
        .info("stage {} on {}{} ({}): {}", p.stage, p.device, p.emulated ? " (emulated)" : "",
              accelerator::DtypeName(p.dtype), p.reason);
  }
  storage::DatabaseOptions db_options;
  db_options.durability = settings.storage.durability;
  // A shard keeps its progress in a database of its own beside the configured one, so that the
  // shards of a job can run side by side on one machine.
  std::string db_path = settings.storage.path;
  if (!options.job.shard.whole()) {
    db_path += "-shard-" + std::to_string(options.job.shard.index) + "-of-" + std::to_string(options.job.shard.count);
  }
  Result<std::unique_ptr<storage::Database>> db = storage::Database::Open(db_path, db_options);
  if (!db.ok()) {
    Log("batch").error("cannot open the database: {}", db.error().ToString());
    return 1;
  }

  std::signal(SIGINT, RequestStop);
  std::signal(SIGTERM, RequestStop);
  options.job.cancel = &stop_requested;
  options.job.max_error_share = options.max_error_share;
  // Progress: a display on stderr; with JSON logs, log lines instead (a display's lines
  // would not be JSON).
  std::optional<ProgressDisplay> display;
  if (!options.quiet && options.logging.format == LogFormat::kText) display.emplace("claims", "claims");
  options.job.progress = [&](const pipelines::ClaimsJobProgress& p) {
    if (p.done == p.resumed_at && p.resumed_at > 0) {
      Log("batch").info("resuming job at row {} of {}", p.resumed_at, p.total);
    }
    if (options.quiet) return;
    std::string note;
    for (const auto& [reason, claims] : p.llm_shortfalls) {
      note += (note.empty() ? "" : ", ") + reason + " " + std::to_string(claims);
    }
    if (!note.empty()) note = "; LLM claims without findings: " + note + " of " + std::to_string(p.llm_selected);
    if (display) {
      display->Update(p.done, p.total, p.resumed_at, note);
    } else {
      Log("batch").info("{} of {} claims done{}", p.done, p.total, note);
    }
  };
  options.job.before_llm = [](int64_t chunk, size_t claims) {
    Log("batch").debug("chunk {}: scoring {} claims", chunk, claims);
  };
  Result<pipelines::ClaimsJobSummary> summary = pipelines::RunClaimsJob(**pipeline, **db, options.job);
  if (!summary.ok()) {
    if (summary.error().field == "max_error_share") {  // stopped early over --max-error-share
      std::fprintf(stderr, "%s\n", summary.error().message.c_str());
      return 3;
    }
    Log("batch").error("the job stopped: {}", summary.error().ToString());
    if (summary.error().code != ErrorCode::kFailedPrecondition && summary.error().code != ErrorCode::kInvalidArgument &&
        summary.error().code != ErrorCode::kNotFound) {
      Log("batch").error("the output holds every row up to the last completed chunk; run the same command to resume");
    }
    return 1;
  }
  if (summary->state == pipelines::ClaimsJobState::kCancelled) {
    std::fprintf(stderr, "stopped after %lld of %lld rows; run the same command to resume\n",
                 static_cast<long long>(summary->done), static_cast<long long>(summary->total));
    return 130;
  }
  if (summary->already_done) {
    std::printf(
        "job %s was already done: %lld of %lld rows, finished earlier; nothing was scored now. Run with "
        "--restart to score the file again.\n",
        summary->job_id.c_str(), static_cast<long long>(summary->done), static_cast<long long>(summary->total));
  } else if (!options.quiet) {
    std::fputs(summary->ToText().c_str(), stdout);
  }
  std::printf("output   %s\nsummary  %s.summary.json\n", options.job.output_path.c_str(),
              options.job.output_path.c_str());
  if (summary->llm_shortfall_total() > 0) {
    std::fprintf(
        stderr,
        "the LLM stage wrote no findings for %lld of the %lld claims it was asked to read (%.1f%%); those rows "
        "list why in \"llm_shortfalls\". Once the cause is fixed, score them again on their own with:\n"
        "  txscore batch run --config %s --input %s --output RETRY.jsonl --retry-llm-shortfalls %s\n",
        static_cast<long long>(summary->llm_shortfall_total()), static_cast<long long>(summary->llm_selected),
        100.0 * summary->LlmShortfallShare(), options.config_path.c_str(), options.job.input_path.c_str(),
        options.job.output_path.c_str());
  }
  const int exit_code = pipelines::BatchRunExitCode(*summary, options.max_error_share, options.max_llm_shortfall_share);
  if (exit_code == 3 && summary->total == 0) {
    std::fprintf(stderr, "no row was scored: %s has no rows (blank lines are skipped)\n",
                 options.job.input_path.c_str());
  } else if (exit_code == 3 && summary->errors == summary->total) {
    std::fprintf(stderr,
                 "no row was scored: all %lld rows are errors (their reasons are in %s); is the file in the "
                 "format its name says (.csv for CSV, anything else JSON lines)?\n",
                 static_cast<long long>(summary->total), options.job.output_path.c_str());
  } else if (exit_code == 3) {
    std::fprintf(stderr, "%lld of %lld rows (%.1f%%) are errors, over --max-error-share %g; their reasons are in %s\n",
                 static_cast<long long>(summary->errors), static_cast<long long>(summary->total),
                 100.0 * static_cast<double>(summary->errors) / static_cast<double>(summary->total),
                 options.max_error_share, options.job.output_path.c_str());
  } else if (exit_code == 4) {
    std::fprintf(stderr, "that is over --max-llm-shortfall-share %g: exit 4\n", options.max_llm_shortfall_share);
  }
  return exit_code;
}

}  // namespace

void AddBatchCommand(CLI::App& app, int* exit_code) {
  CLI::App* batch = app.add_subcommand("batch", "Batch jobs over claims files");
  batch->require_subcommand(1);
  auto options = std::make_shared<BatchRunOptions>();
  CLI::App* run = batch->add_subcommand(
      "run",
      "Score every claim of a file through the claims pipeline; resumable: run it again after a crash or Ctrl-C");
  run->add_option("--config", options->config_path,
                  "Service settings file: storage, key and devices, and the claims pipeline file it names")
      ->capture_default_str();
  run->add_option("--input", options->job.input_path, "Claims: JSON lines, or CSV with a header (.csv)")->required();
  run->add_option("--output", options->job.output_path, "One JSON line per input row; OUTPUT.summary.json at the end")
      ->required();
  run->add_option("--chunk", options->job.chunk_size,
                  "Rows per durable step (default: 8 x the LLM stage's max_batch, at least 64)");
  run->add_flag("--restart", options->job.restart, "Forget an earlier run of this job and its output; start over");
  run->add_flag("--quiet", options->quiet, "No progress display or summary text (errors only)");
  run->add_option("--max-error-share", options->max_error_share,
                  "Exit 3 when more than this share of rows are errors (and whenever no row was scored); "
                  "past 1000 rows, stop there")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  run->add_option("--max-llm-shortfall-share", options->max_llm_shortfall_share,
                  "Exit 4 when the LLM stage writes no findings for more than this share of the claims it reads")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  run->add_option(
      "--retry-llm-shortfalls", options->retry_llm_shortfalls,
      "An earlier run's output: score only its rows the LLM stage wrote no findings for (to a new --output)");
  run->add_option("--shard", options->shard,
                  "Score only shard I of N: rows whose number mod N is I (I/N), or the I-th of N equal ranges "
                  "(I/N:contiguous); join the shards' outputs with `txscore batch merge`");
  AddLoggingOptions(run, &options->logging);
  run->callback([options, exit_code] { *exit_code = RunBatch(*options); });

  auto merge_options = std::make_shared<BatchMergeOptions>();
  CLI::App* merge = batch->add_subcommand(
      "merge", "Join the outputs of a job's shards (batch run --shard I/N) into one output in input order");
  merge->add_option("--output", merge_options->output, "The merged output; OUTPUT.summary.json beside it")->required();
  merge->add_flag("--force", merge_options->force,
                  "Replace OUTPUT and its summary when they exist (refused otherwise)");
  merge->add_option("shard_outputs", merge_options->shard_outputs, "The outputs of shards 0..N-1, in any order")
      ->required();
  merge->callback([merge_options, exit_code] { *exit_code = RunMerge(*merge_options); });
}

}  // namespace txscore::service
