// A batch claims job: every claim of an input file through the claims pipeline, one JSON line
// per input row in the output file, resumable exactly once.
//
// Input: JSON lines (one claim object per line; blank lines are skipped) or, for a .csv file,
// CSV with a header row (fraud/claim.h). A row that cannot be read or validated becomes an
// error line naming its line number and the field; the job goes on.
//
// Output, per row, in input order:
//   {"line": 7, "claim_id": "...", "score": 0.91, "decision": "REVIEW", "reasons": [...],
//    "findings": {...} or null, "stage_scores": {...}, "devices": {...},
//    "llm_shortfalls": [{"stage": "analysis", "reason": "failed", "detail": "..."}],
//    "timings": {"stage": microseconds, ...}}
//   {"line": 8, "error": "amount_claimed must be a number", "field": "amount_claimed"}
// Everything but "timings" depends only on the input, the models and the configuration
// (greedy decoding), so two runs can be compared line by line with "timings" removed.
//
// Exactly once: the job works in chunks of `chunk_size` rows. After each chunk its lines are
// appended to the output and fsynced, then the job's progress (rows done, output length,
// running totals) is written to RocksDB (column family `jobs`, synced). Started again after a
// crash or a SIGKILL at any point, the job truncates the output to the recorded length and
// goes on from the recorded row, so every row is in the output exactly once, in order. Chunk
// boundaries are recorded too, so the LLM sees the same batches as an uninterrupted run. The
// job is identified by its input and output paths; if the input's SHA-256 differs from the
// one recorded when the job began, the job refuses to run rather than mix two files.
//
// LLM shortfalls: a claim the LLM stage was asked to read but wrote no findings for (the model
// failed, or ran out of time) is decided on its score like any other, and its line lists why
// in "llm_shortfalls". The job counts them per reason (summary, progress), logs each chunk's,
// and LlmShortfallShare() tells callers when to treat the run as degraded. Such claims can be
// scored again on their own with `only_lines` (`txscore batch run --retry-llm-shortfalls`).
//
// The job's record (ClaimsJobRecord) has a state: queued (by a server, before it starts),
// running (and after a crash, still running), interrupted (a server stop), cancelled, failed
// (with its error), done.
//
// The job's parts: this file's RunClaimsJob is the job loop; pipelines/claims_rows.h reads
// the input rows, pipelines/claims_output.h writes the output lines and the summary,
// pipelines/claims_job_record.h encodes the record in RocksDB, and common/durable_file.h
// appends to the output file durably.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "pipelines/claims_job_record.h"  // ClaimsJobRecord, ReadClaimsJob, ClaimsJobId, ...
#include "pipelines/claims_output.h"      // ClaimsJobSummary
#include "pipelines/claims_pipeline.h"
#include "storage/database.h"

namespace txscore::pipelines {

struct ClaimsJobProgress {
  int64_t done = 0;                               // rows finished, including those of earlier runs of the job
  int64_t total = 0;                              // rows in the input
  int64_t errors = 0;                             // rows that became error lines
  int64_t resumed_at = 0;                         // rows already done when this run started
  int64_t llm_selected = 0;                       // claims the LLM stage was asked to read
  std::map<std::string, int64_t> llm_shortfalls;  // of those without findings: reason -> claims
};

// Which rows of the input a run scores, so that a job can be split across workers (a
// Kubernetes Indexed Job's completion index as `index`): the rows whose ordinal r (0 for the
// input's first row, counting every row, good or bad) has r mod count == index, or, contiguous,
// the index-th of `count` ranges of equal size (rows [index*N/count, (index+1)*N/count) of N).
// Each shard is a job of its own (its own id, progress and output), resumable on its own;
// `txscore batch merge` (pipelines/claims_merge.h) joins the shards' outputs in input order.
struct ClaimsShard {
  int index = 0;  // Default: 0 of 1, every row
  int count = 1;
  bool contiguous = false;  // Default: round robin (r mod count)
  // "I/N" or "I/N:contiguous" (as --shard takes it); kInvalidArgument naming the form.
  static Result<ClaimsShard> Parse(const std::string& text);
  std::string Name() const;  // "" for the whole input
  bool whole() const { return count == 1; }
  // Whether the row of ordinal `ordinal` belongs to this shard, of `rows` in the input.
  bool Selects(int64_t ordinal, int64_t rows) const;
};

// Rows a job does before its error share can stop it (ClaimsJobOptions::max_error_share): a
// few bad rows at the top of a good file must not end it.
inline constexpr int64_t kErrorShareCheckRows = 1000;

struct ClaimsJobOptions {
  std::string input_path;   // required
  std::string output_path;  // required; OUTPUT.summary.json is written beside it at the end
  // Default: 0, meaning 8 times the LLM stage's max_batch, at least 64: only the suspicious
  // share of a chunk reaches the LLM, and its batches should still fill. A resumed job keeps
  // the chunk size it began with.
  int chunk_size = 0;
  // Default: false. Forget an earlier run of this job (its progress and its output) and start over.
  bool restart = false;
  // Default: empty, every row. Otherwise only the rows starting at these line numbers are
  // scored and written; every row's claim still goes into the providers' stored histories (the
  // provider feature), so a row scores as it did in a run over the whole file. Part of the job's id.
  std::set<int64_t> only_lines;
  // Default: empty. The claim_id that rows of only_lines must hold (a retry takes them from the
  // earlier output): a row holding another fails the job before anything is written, since the
  // earlier output was then not written from this input.
  std::map<int64_t, std::string> expected_claim_ids;
  // Default: the whole input. A shard of it (with only_lines, the rows both select). Part of
  // the job's id; the summary says which shard it was.
  ClaimsShard shard;
  // Called once before the first chunk and after each chunk is durable.
  std::function<void(const ClaimsJobProgress&)> progress;
  // When set to true (from another thread or a signal handler), the job stops after the chunk
  // in flight; started again, it resumes. Not owned.
  const std::atomic<bool>* cancel = nullptr;
  // Like `cancel`, but the job's record and the returned summary say "interrupted": a
  // stopping server uses it, to resume the job when it starts again. Not owned.
  const std::atomic<bool>* interrupt = nullptr;
  // Default: 1, never. The job stops, failing with the counts and where the reasons are, after
  // the first chunk that brings it to kErrorShareCheckRows rows or more (its last chunk
  // included) when more than this share of them are errors: a file in the wrong format or of
  // the wrong kind, found early. A job of fewer rows runs to its end whatever its errors.
  double max_error_share = 1.0;
  // Called before each LLM submission of a chunk (tests use it to kill the process mid-batch).
  std::function<void(int64_t chunk, size_t claims)> before_llm;
};

// The exit code of `txscore batch run` for a run that finished: 3 when no row was scored (an
// empty input too) or
// more than `max_error_share` of the rows are errors; otherwise 4 when the LLM stage wrote no
// findings for more than `max_llm_shortfall_share` of the claims it was asked to read; else 0.
int BatchRunExitCode(const ClaimsJobSummary& summary, double max_error_share, double max_llm_shortfall_share);

// Runs (or resumes) the job. `db` holds its progress. Errors: the input missing or changed
// since the job began (kFailedPrecondition), an output file that this job did not write
// (kFailedPrecondition), storage or model failures (kInternal, kDataLoss); the output then ends
// at the last durable chunk and the job can be resumed.
Result<ClaimsJobSummary> RunClaimsJob(ClaimsPipeline& pipeline, storage::Database& db, const ClaimsJobOptions& options);

}  // namespace txscore::pipelines
