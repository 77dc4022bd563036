// What a claims job (pipelines/claims_job.h) writes: one JSON line per input row, and its
// summary (OUTPUT.summary.json, and the text `txscore batch run` prints).
//
// Formats (the job output; tests compare them byte for byte):
//   OutcomeLine: {"line":7,"claim_id":"...","score":0.91,"decision":"REVIEW","reasons":[...],
//     "rule_hits":[{"rule":"R1","decision":"DECLINE" or null}],"findings":{...} or null,
//     "stage_scores":{...},"devices":{...},"llm_shortfalls":[{"stage","reason","detail"}],
//     "timings":{"stage":microseconds}} and a newline; a reason's "value" is null when missing.
//   ErrorLine: {"line":8,"error":"...","field":"..."} and a newline; "field" only when the
//     error names one; card numbers in the message are redacted (common/pan_scan.h).
//   Invalid UTF-8 in either is replaced (U+FFFD), never an exception.
//   ClaimsJobSummary::ToJson: an object indented by 2, keys in the order written in ToJson.
//
// Thread safety: the functions are pure but for WriteSummaryFile, which replaces one file
// (by rename) and must not run for the same output from two threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "pipelines/claims_pipeline.h"

namespace txscore::pipelines {

// Where a claims job stands, as its record stores it (by name).
enum class ClaimsJobState {
  kQueued,       // a server accepted it and has not started it
  kRunning,      // started (and, found so after a crash, stopped by it)
  kInterrupted,  // a stopping server stopped it; resumable
  kCancelled,    // stopped by a cancel
  kFailed,       // stopped by an error (its record says which)
  kDone,         // every row is in the output
};
const char* ClaimsJobStateName(ClaimsJobState state);  // "queued", "running", ..., "done"
std::optional<ClaimsJobState> ParseClaimsJobState(std::string_view name);

struct ClaimsJobSummary {
  std::string job_id;
  std::string input;         // the input's absolute path (set at each run, not stored)
  std::string input_sha256;  // its SHA-256 (hex) when the job began
  std::string shard;         // ClaimsShard::Name: "" for the whole input, else "I/N[:contiguous]"
  ClaimsJobState state =
      ClaimsJobState::kRunning;  // kDone; kCancelled when stopped by `cancel`; kInterrupted by `interrupt`
  bool already_done = false;     // this call found the job finished earlier and scored nothing (not stored)
  int64_t total = 0;
  int64_t done = 0;
  int64_t errors = 0;
  int64_t analysed = 0;                           // claims the LLM wrote findings for
  int64_t llm_selected = 0;                       // claims the LLM stage was asked to read (analysed + shortfalls)
  std::map<std::string, int64_t> llm_shortfalls;  // reason (failed, cut_short, skipped) -> claims
  std::map<std::string, int64_t> decisions;       // APPROVE/REVIEW/DECLINE -> claims
  std::map<std::string, int64_t> flags;           // findings flag -> claims
  std::map<std::string, int64_t>
      stage_us;  // stage -> microseconds, summed over claims (an LLM stage: over its batches)
  std::map<std::string, std::string> devices;  // stage -> device
  double elapsed_s = 0;                        // working time, over every run of the job
  int runs = 0;                                // how many times the job was started before it finished
  // The bundle digest (bundle_digest.h) of the pipeline of each run, in order, a repeat left
  // out: one unless the pipeline's files changed between runs of the job.
  std::vector<std::string> pipeline_digests;
  double claims_per_s() const { return elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0; }
  int64_t llm_shortfall_total() const;
  // Shortfalls over claims the LLM stage was asked to read; 0 when it was asked for none.
  double LlmShortfallShare() const;
  std::string ToJson() const;  // what OUTPUT.summary.json holds
  std::string ToText() const;  // what `txscore batch run` prints
};

// The output line of the row starting at `line` that was scored as `outcome`.
std::string OutcomeLine(int64_t line, const ClaimOutcome& outcome);
// The output line of the row starting at `line` that could not be read or validated.
std::string ErrorLine(int64_t line, const Error& error);

// Writes summary.ToJson() to OUTPUT_PATH.summary.json, through a temporary file renamed over
// it. Errors: kInternal.
Status WriteSummaryFile(const std::string& output_path, const ClaimsJobSummary& summary);

}  // namespace txscore::pipelines
