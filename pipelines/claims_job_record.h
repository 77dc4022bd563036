// What the database keeps about claims jobs (pipelines/claims_job.h), in column family `jobs`:
// one record per job, under the key "claims-job/" + its id, and the claims history of each
// provider the jobs have seen (fraud/provider_history.h), under "claims-provider/" + its id.
//
// Format: a JSON object (JobState::Encode), readable by any tool. Records written before a
// field existed, and records of jobs that have not begun (queued, or failed before they
// began: no "input_sha256"), lack some fields; Decode gives those their defaults. A record
// that is not such an object is refused with kDataLoss.
//
// Thread safety: the functions keep no state of their own; storage::Database orders
// concurrent writes, but a read-modify-write (SetClaimsJobState) is not atomic, so one thread
// at a time should change a given job's record (a server's ClaimsJobManager does).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/provider_history.h"
#include "pipelines/claims_output.h"
#include "storage/database.h"

namespace txscore::pipelines {

// A claim as the provider histories hold it.
struct ProviderClaim {
  uint64_t claim_digest = 0;  // fraud::ProviderClaimsHistory::ClaimDigest
  int64_t report_day = 0;
};

// The stored claims history of a provider; empty for one never seen.
// Errors: the stored history is damaged (kDataLoss), or the read failed.
Result<fraud::ProviderClaimsHistory> ReadProviderHistory(storage::Database& db, const std::string& provider_id);

// Adds `claims` (by provider id) to the stored histories, each provider's pruned to its
// retention, in one atomic write. Returns the histories of those providers with `claims`
// added and nothing pruned, for counting. A claim already held changes nothing, so recording
// a file again is harmless. One call at a time in a process (a read-modify-write: a mutex
// here orders them; the database's lock keeps other processes out).
// Errors: a stored history is damaged (kDataLoss), or the read or write failed.
Result<std::map<std::string, fraud::ProviderClaimsHistory>> RecordProviderClaims(
    storage::Database& db, const std::map<std::string, std::vector<ProviderClaim>>& claims);

// A job's whole record, as the job loop reads and writes it.
struct JobState {
  std::string input, output, input_sha256;  // absolute paths; the input's SHA-256 (hex) when the job began
  // The input's common/file_io.h FileVersionStamp when it was last hashed ("" when it changed
  // while it was hashed, or in records of earlier versions).
  std::string input_version;
  int chunk_size = 0;
  int64_t total = 0, rows_done = 0, output_bytes = 0;
  std::string error;         // kFailed: why
  bool restart = false;      // kQueued: to start over
  ClaimsJobSummary summary;  // its state and running totals (job_id and already_done are not stored)

  bool begun() const { return !input_sha256.empty(); }

  std::string Encode() const;
  // Errors: not a JSON object with at least "input", "output" and "state" of the right types
  // (kDataLoss).
  static Result<JobState> Decode(const std::string& text);
};

// The key of job `job_id`'s record in column family `jobs`.
std::string ClaimsJobKey(const std::string& job_id);
// Writes `state` under `key`, with the database's durability.
Status SaveState(storage::Database& db, const std::string& key, const JobState& state);

// What the database holds about a job: its state and last recorded progress.
struct ClaimsJobRecord {
  std::string input, output;
  ClaimsJobState state = ClaimsJobState::kQueued;
  std::string error;     // failed: why
  bool restart = false;  // queued: to start over (ClaimsJobOptions::restart)
  int64_t total = 0, done = 0, errors = 0;
  int64_t llm_selected = 0;
  std::map<std::string, int64_t> llm_shortfalls;
  double elapsed_s = 0;
  std::string input_sha256;   // of the input when the job began ("" before)
  std::string input_version;  // JobState::input_version
};
// nullopt for a job the database has no record of.
Result<std::optional<ClaimsJobRecord>> ReadClaimsJob(storage::Database& db, const std::string& job_id);
// Every job the database has a record of, by job id.
Result<std::map<std::string, ClaimsJobRecord>> ListClaimsJobs(storage::Database& db);
// Sets the state (and error) of the job with these absolute paths, keeping its progress; a
// job with no record gets one without progress (a server records "queued" this way).
// `restart`: the job was queued to start over (a server queueing it again after a stop keeps that).
Status SetClaimsJobState(storage::Database& db, const std::string& input, const std::string& output,
                         ClaimsJobState state, const std::string& error = "", bool restart = false);

// The first 16 hex characters of the SHA-256 of `text`: names derived from content.
std::string ShortDigest(const std::string& text);

// The id of the job with these input and output paths (absolute), `only_lines` and shard
// (ClaimsShard::Name; "" for the whole input): 16 hex characters.
std::string ClaimsJobId(const std::string& input_path, const std::string& output_path,
                        const std::set<int64_t>& only_lines = {}, const std::string& shard = "");

}  // namespace txscore::pipelines
