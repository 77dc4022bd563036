#include "pipelines/claims_job.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "common/durable_file.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/pan_scan.h"
#include "common/sha256.h"
#include "pipelines/claims_rows.h"

namespace txscore::pipelines {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

// Rows per chunk: at least 64, and 8 LLM batches' worth, since only the suspicious share of a
// chunk (often a tenth) reaches the LLM and its batches should still fill.
constexpr int kMinChunk = 64;
constexpr int kChunkBatches = 8;

// One run of a job whose paths, id and key RunClaimsJob worked out. `state` is what the
// database should say when this returns; `*recorded` is set once the database holds a record
// of the job (RunClaimsJob then records a failure there).
Result<ClaimsJobSummary> RunJob(ClaimsPipeline& pipeline, storage::Database& db, const ClaimsJobOptions& options,
                                const std::string& input, const std::string& output, const std::string& job_id,
                                JobState* job, bool* recorded) {
  const SteadyClock::time_point started = SteadyClock::now();
  const std::string key = ClaimsJobKey(job_id);
  JobState& state = *job;
  Result<std::optional<std::string>> stored = db.Get(storage::ColumnFamily::kJobs, key);
  if (!stored.ok()) return stored.error();
  *recorded = stored->has_value();
  if (stored->has_value() && !options.restart) {
    Result<JobState> decoded = JobState::Decode(**stored);
    if (!decoded.ok()) return decoded.error();
    state = std::move(decoded).value();
    state.error.clear();
  }

  const std::string version = FileVersionStamp(input);
  Result<std::string> digest = Sha256HexOfFile(input);
  if (!digest.ok()) return digest.error();
  if (state.begun()) {
    if (state.input_sha256 != *digest) {
      return FailedPrecondition("input " + input + " has changed since job " + job_id + " began (SHA-256 " +
                                    state.input_sha256.substr(0, 12) + "..., now " + digest->substr(0, 12) +
                                    "...); its output " + output +
                                    " holds results of the old file. Run again with --restart to start over on the "
                                    "new file, or write to another --output",
                                "input");
    }
  } else {
    std::error_code ec;
    if (!options.restart && fs::exists(output) && fs::file_size(output, ec) > 0) {
      return FailedPrecondition("output " + output +
                                    " exists and was not written by this job; move it away, "
                                    "choose another --output, or run with --restart to overwrite it",
                                "output");
    }
    state = JobState();
    state.input = input;
    state.output = output;
    state.input_sha256 = *digest;
    state.chunk_size =
        options.chunk_size > 0 ? options.chunk_size : std::max(kMinChunk, kChunkBatches * pipeline.preferred_chunk());
    state.summary.state = ClaimsJobState::kRunning;
  }
  // Unchanged while it was hashed: a server may tell a finished job's input is still this one
  // by the stamp, without reading it (service/claims_jobs.h).
  state.input_version = FileVersionStamp(input) == version ? version : "";
  ClaimsJobSummary& summary = state.summary;
  summary.job_id = job_id;
  summary.input = input;
  summary.input_sha256 = state.input_sha256;
  summary.shard = options.shard.Name();
  if (summary.state == ClaimsJobState::kDone) {  // finished before: the output is complete
    summary.total = state.total;
    summary.done = state.rows_done;
    TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));  // its input's stamp, if that changed
    TXSCORE_RETURN_IF_ERROR(WriteSummaryFile(output, summary));
    ClaimsJobSummary finished = summary;
    finished.already_done = true;
    return finished;
  }

  std::atomic<bool> never{false};
  const std::atomic<bool>* cancel = options.cancel != nullptr ? options.cancel : &never;
  const std::atomic<bool>* interrupt = options.interrupt != nullptr ? options.interrupt : &never;
  // Ends a run stopped by `cancel` or `interrupt`: the record says which (a stopping server
  // queues an interrupted job again when it starts: it must find the job's record).
  auto stop = [&]() -> Result<ClaimsJobSummary> {
    summary.state = cancel->load() ? ClaimsJobState::kCancelled : ClaimsJobState::kInterrupted;
    summary.done = state.rows_done;
    summary.elapsed_s += std::chrono::duration<double>(SteadyClock::now() - started).count();
    TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));
    *recorded = true;
    return summary;
  };
  // The rows this job scores: all, or those of options.only_lines and of its shard. A
  // contiguous shard needs the number of rows first: one more pass over the input.
  int64_t input_rows = 0;
  if (options.shard.contiguous) {
    Result<RowReader> counter =
        RowReader::Open(input, [cancel, interrupt] { return cancel->load() || interrupt->load(); });
    if (!counter.ok()) return counter.error();
    for (Row counted; counter->Next(&counted);) ++input_rows;
  }
  const auto selected = [&options, &input_rows](const Row& row, int64_t ordinal) {
    return (options.only_lines.empty() || options.only_lines.count(row.line) > 0) &&
           options.shard.Selects(ordinal, input_rows);
  };
  auto next_row = [&selected](RowReader& reader, Row* row, int64_t* ordinal) {
    while (reader.Next(row)) {
      if (selected(*row, (*ordinal)++)) return true;
    }
    return false;
  };

  // First pass: count rows, and gather every claim of the file (selected or not, so that
  // shards see what an unsharded job sees) into the providers' stored histories, which the
  // provider feature counts by date (fraud/provider_history.h). A stop asked while counting
  // ends the count at once.
  std::map<std::string, std::vector<ProviderClaim>> file_claims;
  int64_t total = 0;
  {
    Result<RowReader> reader =
        RowReader::Open(input, [cancel, interrupt] { return cancel->load() || interrupt->load(); });
    if (!reader.ok()) return reader.error();
    Row row;
    size_t expected_found = 0;
    auto not_from_this_input = [&](const std::string& what) {
      return FailedPrecondition(RedactPans(what + ": the earlier output was not written from " + input), "input");
    };
    for (int64_t ordinal = 0; reader->Next(&row); ++ordinal) {
      if (selected(row, ordinal)) ++total;
      if (auto expected = options.expected_claim_ids.find(row.line); expected != options.expected_claim_ids.end()) {
        ++expected_found;
        if (!row.claim.ok()) {
          return not_from_this_input("line " + std::to_string(row.line) +
                                     " is not a claim, where the earlier output "
                                     "names " +
                                     expected->second);
        }
        if (row.claim->claim_id != expected->second) {
          return not_from_this_input("line " + std::to_string(row.line) + " holds claim " + row.claim->claim_id +
                                     ", where the earlier output names " + expected->second);
        }
      }
      if (!row.claim.ok()) continue;
      Result<fraud::Claim> claim = fraud::ValidateClaim(*row.claim, pipeline.tokenizer());
      if (claim.ok()) {
        file_claims[claim->provider_id].push_back(
            {fraud::ProviderClaimsHistory::ClaimDigest(claim->claim_id), claim->report_day});
      }
    }
    if (!reader->stopped() && expected_found < options.expected_claim_ids.size()) {
      return not_from_this_input(std::to_string(options.expected_claim_ids.size() - expected_found) + " of the " +
                                 std::to_string(options.expected_claim_ids.size()) +
                                 " lines it names are not in this input");
    }
    if (reader->stopped() || cancel->load() || interrupt->load()) {
      if (!*recorded && cancel->load()) {  // nothing of this job was written: leave nothing behind
        summary.state = ClaimsJobState::kCancelled;
        return summary;
      }
      return stop();
    }
  }
  Result<std::map<std::string, fraud::ProviderClaimsHistory>> provider_histories =
      RecordProviderClaims(db, file_claims);
  if (!provider_histories.ok()) return provider_histories.error();
  file_claims.clear();
  const auto provider_claims_before = [&provider_histories](const fraud::Claim& claim) -> int64_t {
    const auto history = provider_histories->find(claim.provider_id);
    return history == provider_histories->end() ? 0 : history->second.CountBefore(claim.report_day);
  };
  state.total = total;
  summary.total = total;
  summary.runs += 1;
  // What decides this run's rows; a job resumed after its pipeline changed names both.
  if (summary.pipeline_digests.empty() || summary.pipeline_digests.back() != pipeline.bundle_digest()) {
    summary.pipeline_digests.push_back(pipeline.bundle_digest());
  }
  summary.state = ClaimsJobState::kRunning;
  for (int i : pipeline.config().graph.order()) {
    const GraphStage& stage = pipeline.config().graph.stage(i);
    if (const accelerator::Placement* p = pipeline.plan().Find(stage.name)) summary.devices[stage.name] = p->device;
  }

  AppendOnlyFile out;  // a new (or restarted) job's state says 0 bytes: the file is emptied
  if (Status opened = out.Open(output, state.output_bytes); !opened.ok()) {
    if (opened.error().code != ErrorCode::kDataLoss) return opened.error();
    return DataLoss(opened.error().message +
                    " by the job's progress: it was changed outside the job; start over "
                    "with --restart");
  }
  TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));
  *recorded = true;

  Result<RowReader> reader = RowReader::Open(input);
  if (!reader.ok()) return reader.error();
  Row row;
  int64_t ordinal = 0;  // of the next row the reader gives
  for (int64_t skipped = 0; skipped < state.rows_done && next_row(*reader, &row, &ordinal); ++skipped) {
  }
  ClaimsJobProgress progress{state.rows_done,       total, summary.errors, state.rows_done, summary.llm_selected,
                             summary.llm_shortfalls};
  if (options.progress) options.progress(progress);

  // Stages that run a chunk in batches report each claim its batch's time: count it once.
  // By graph index, which is each claim timing's slot.
  const StageGraph& graph = pipeline.config().graph;
  std::vector<bool> batched(graph.size(), false);
  for (size_t i = 0; i < graph.size(); ++i) batched[i] = pipeline.stage(static_cast<int>(i)).preferred_chunk() > 0;
  const double elapsed_before = summary.elapsed_s;
  int64_t chunk_index = state.rows_done / state.chunk_size;
  while (state.rows_done < total) {
    if (cancel->load() || interrupt->load()) {
      summary.elapsed_s = elapsed_before;
      return stop();
    }
    std::vector<Row> rows;
    while (static_cast<int>(rows.size()) < state.chunk_size && next_row(*reader, &row, &ordinal)) {
      rows.push_back(std::move(row));
    }
    if (rows.empty()) break;  // fewer rows than counted: the file changed under us (the digest is checked at start)
    std::vector<fraud::Claim> claims;
    std::vector<int64_t> providers;
    std::vector<std::optional<Error>> errors(rows.size());
    std::vector<size_t> claim_of_row(rows.size(), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!rows[r].claim.ok()) {
        errors[r] = rows[r].claim.error();
        continue;
      }
      Result<fraud::Claim> claim = fraud::ValidateClaim(*rows[r].claim, pipeline.tokenizer());
      if (!claim.ok()) {
        errors[r] = claim.error();
        continue;
      }
      claim_of_row[r] = claims.size();
      providers.push_back(provider_claims_before(*claim));
      claims.push_back(std::move(claim).value());
    }
    if (options.before_llm) options.before_llm(chunk_index, claims.size());
    Result<std::vector<ClaimOutcome>> outcomes = pipeline.ScoreChunk(claims, providers);
    if (!outcomes.ok()) return outcomes.error();
    // The chunk's totals count only once its lines are durable: until then they go here.
    ClaimsJobSummary next = summary;
    std::string text;
    // The chunk's tallies by index (graph index, decision, outcome), named once per chunk below.
    // Per stage: summed over claims; a batched stage: the longest of its claims' (batch) times.
    // -1: the stage did not run in this chunk.
    std::vector<int64_t> stage_us(graph.size(), -1);
    std::array<int64_t, 3> decisions{};   // by Decision - 1
    std::array<int64_t, 4> shortfalls{};  // by StageReport::Outcome
    std::string first_shortfall;
    int64_t chunk_selected = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (errors[r]) {
        text += ErrorLine(rows[r].line, *errors[r]);
        next.errors += 1;
        continue;
      }
      const ClaimOutcome& o = (*outcomes)[claim_of_row[r]];
      text += OutcomeLine(rows[r].line, o);
      ++decisions[static_cast<size_t>(o.decision) - 1];
      if (o.llm_selected) ++chunk_selected;
      if (o.findings) {
        next.analysed += 1;
        for (const std::string& flag : o.findings->flags) next.flags[flag] += 1;
      }
      for (const LlmShortfall& s : o.llm_shortfalls) {
        ++shortfalls[static_cast<size_t>(s.reason)];
        if (first_shortfall.empty()) {
          first_shortfall = "line " + std::to_string(rows[r].line) + ": " + OutcomeName(s.reason) + ": " + s.detail;
        }
      }
      for (const StageTiming& t : o.timings) {
        int64_t& us = stage_us[static_cast<size_t>(t.slot)];
        us = std::max<int64_t>(us, 0);
        us = batched[static_cast<size_t>(t.slot)] ? std::max(us, t.elapsed_us) : us + t.elapsed_us;
      }
      for (const auto& [stage, device] : o.devices) next.devices[stage] = device;
    }
    for (size_t i = 0; i < graph.size(); ++i) {
      if (stage_us[i] >= 0) next.stage_us[graph.stage(static_cast<int>(i)).name] += stage_us[i];
    }
    for (Decision d : {Decision::kApprove, Decision::kReview, Decision::kDecline}) {
      if (decisions[static_cast<size_t>(d) - 1] > 0)
        next.decisions[DecisionName(d)] += decisions[static_cast<size_t>(d) - 1];
    }
    std::map<std::string, int64_t> chunk_shortfalls;
    for (StageReport::Outcome reason :
         {StageReport::Outcome::kSkipped, StageReport::Outcome::kCutShort, StageReport::Outcome::kFailed}) {
      if (shortfalls[static_cast<size_t>(reason)] > 0)
        chunk_shortfalls[OutcomeName(reason)] = shortfalls[static_cast<size_t>(reason)];
    }
    next.llm_selected += chunk_selected;
    for (const auto& [reason, claims_short] : chunk_shortfalls) next.llm_shortfalls[reason] += claims_short;
    if (!chunk_shortfalls.empty()) {
      std::string counts;
      for (const auto& [reason, n] : chunk_shortfalls)
        counts += (counts.empty() ? "" : ", ") + reason + " " + std::to_string(n);
      Log("claims").warn(
          "job {} chunk {}: the LLM stage wrote no findings for {} of the {} claims it was asked to read ({}); "
          "first: {}",
          job_id, chunk_index, next.llm_shortfall_total() - summary.llm_shortfall_total(), chunk_selected, counts,
          first_shortfall);
    }
    TXSCORE_RETURN_IF_ERROR(out.AppendDurably(text));
    summary = std::move(next);
    state.rows_done += static_cast<int64_t>(rows.size());
    state.output_bytes = out.length();
    summary.elapsed_s = elapsed_before + std::chrono::duration<double>(SteadyClock::now() - started).count();
    TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));
    ++chunk_index;
    progress.done = state.rows_done;
    progress.errors = summary.errors;
    progress.llm_selected = summary.llm_selected;
    progress.llm_shortfalls = summary.llm_shortfalls;
    if (options.progress) options.progress(progress);
    const bool over_error_share =
        static_cast<double>(summary.errors) > options.max_error_share * static_cast<double>(state.rows_done);
    if (state.rows_done >= kErrorShareCheckRows && over_error_share) {
      char share[64];
      std::snprintf(share, sizeof share, "%.1f %%",
                    100.0 * static_cast<double>(summary.errors) / static_cast<double>(state.rows_done));
      std::ostringstream limit;
      limit << options.max_error_share;
      return InvalidArgument("stopped after " + std::to_string(state.rows_done) + " of " + std::to_string(total) +
                                 " rows: " + std::to_string(summary.errors) + " (" + share +
                                 ") are errors, over the maximum error share " + limit.str() + "; the reasons are in " +
                                 output +
                                 ". Is the file in the format its name says (.csv for CSV, anything else JSON "
                                 "lines)? Fix it and run again with --restart",
                             "max_error_share");
    }
  }
  summary.state = ClaimsJobState::kDone;
  summary.done = state.rows_done;
  summary.elapsed_s = elapsed_before + std::chrono::duration<double>(SteadyClock::now() - started).count();
  TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));
  TXSCORE_RETURN_IF_ERROR(WriteSummaryFile(output, summary));
  return summary;
}

}  // namespace

Result<ClaimsShard> ClaimsShard::Parse(const std::string& text) {
  ClaimsShard shard;
  std::string rest = text;
  const std::string kContiguous = ":contiguous";
  if (rest.size() > kContiguous.size() &&
      rest.compare(rest.size() - kContiguous.size(), kContiguous.size(), kContiguous) == 0) {
    shard.contiguous = true;
    rest.resize(rest.size() - kContiguous.size());
  }
  const size_t slash = rest.find('/');
  const auto number = [](const std::string& digits, int* out) {
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *out = std::stoi(digits);
    return true;
  };
  if (slash == std::string::npos || !number(rest.substr(0, slash), &shard.index) ||
      !number(rest.substr(slash + 1), &shard.count) || shard.count < 1 || shard.index >= shard.count) {
    return InvalidArgument("--shard takes I/N with 0 <= I < N (e.g. 0/3), or I/N:contiguous; not \"" + text + "\"",
                           "shard");
  }
  return shard;
}

std::string ClaimsShard::Name() const {
  if (whole() && !contiguous) return "";
  return std::to_string(index) + "/" + std::to_string(count) + (contiguous ? ":contiguous" : "");
}

bool ClaimsShard::Selects(int64_t ordinal, int64_t rows) const {
  if (!contiguous) return ordinal % count == index;
  return ordinal >= index * rows / count && ordinal < (index + 1) * rows / count;
}

int BatchRunExitCode(const ClaimsJobSummary& summary, double max_error_share, double max_llm_shortfall_share) {
  if (summary.errors == summary.total) return 3;  // no row scored, an empty input included
  if (static_cast<double>(summary.errors) > max_error_share * static_cast<double>(summary.total)) return 3;
  if (summary.LlmShortfallShare() > max_llm_shortfall_share) return 4;
  return 0;
}

Result<ClaimsJobSummary> RunClaimsJob(ClaimsPipeline& pipeline, storage::Database& db,
                                      const ClaimsJobOptions& options) {
  if (options.input_path.empty()) return InvalidArgument("an input file is required", "input");
  if (options.output_path.empty()) return InvalidArgument("an output file is required", "output");
  std::error_code ec;
  const std::string input = fs::absolute(options.input_path, ec).lexically_normal().string();
  const std::string output = fs::absolute(options.output_path, ec).lexically_normal().string();
  if (input == output) return InvalidArgument("the output file must not be the input file", "output");
  if (options.shard.count < 1 || options.shard.index < 0 || options.shard.index >= options.shard.count) {
    return InvalidArgument("shard " + std::to_string(options.shard.index) + " of " +
                               std::to_string(options.shard.count) + " does not exist (0 <= I < N)",
                           "shard");
  }
  const std::string job_id = ClaimsJobId(input, output, options.only_lines, options.shard.Name());

  JobState state;
  bool recorded = false;
  Result<ClaimsJobSummary> summary = RunJob(pipeline, db, options, input, output, job_id, &state, &recorded);
  if (!summary.ok() && recorded) {
    // The record says why the job stopped; its progress stays, so that it can resume.
    state.summary.state = ClaimsJobState::kFailed;
    state.error = RedactPans(summary.error().message);
    if (state.input.empty()) {
      state.input = input;
      state.output = output;
    }
    if (Status saved = SaveState(db, ClaimsJobKey(job_id), state); !saved.ok()) {
      Log("claims").error("job {}: cannot record that it failed: {}", job_id, saved.error().ToString());
    }
  }
  return summary;
}

}  // namespace txscore::pipelines
