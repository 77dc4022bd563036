#include "pipelines/claims_job_record.h"

#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/logging.h"
#include "common/sha256.h"

namespace txscore::pipelines {
namespace {

using json = nlohmann::ordered_json;

constexpr char kJobKeyPrefix[] = "claims-job/";
constexpr char kProviderKeyPrefix[] = "claims-provider/";

std::mutex& ProviderHistoryMutex() {
  static std::mutex mutex;
  return mutex;
}

Result<ClaimsJobRecord> DecodeRecord(const std::string& stored) {
  TXSCORE_ASSIGN_OR_RETURN(const JobState state, JobState::Decode(stored));
  ClaimsJobRecord record;
  record.input = state.input;
  record.output = state.output;
  record.state = state.summary.state;
  record.error = state.error;
  record.restart = state.restart;
  record.total = state.total;
  record.done = state.rows_done;
  record.errors = state.summary.errors;
  record.llm_selected = state.summary.llm_selected;
  record.llm_shortfalls = state.summary.llm_shortfalls;
  record.elapsed_s = state.summary.elapsed_s;
  record.input_sha256 = state.input_sha256;
  record.input_version = state.input_version;
  return record;
}

}  // namespace

std::string JobState::Encode() const {
  const ClaimsJobSummary& s = summary;
  json doc = {{"input", input},
              {"output", output},
              {"input_sha256", input_sha256},
              {"input_version", input_version},
              {"chunk_size", chunk_size},
              {"total", total},
              {"rows_done", rows_done},
              {"output_bytes", output_bytes},
              {"state", ClaimsJobStateName(s.state)},
              {"error", error},
              {"restart", restart},
              {"errors", s.errors},
              {"analysed", s.analysed},
              {"llm_selected", s.llm_selected},
              {"llm_shortfalls", s.llm_shortfalls},
              {"decisions", s.decisions},
              {"flags", s.flags},
              {"stage_us", s.stage_us},
              {"devices", s.devices},
              {"elapsed_s", s.elapsed_s},
              {"runs", s.runs},
              {"pipeline_digests", s.pipeline_digests}};
  return doc.dump();
}

Result<JobState> JobState::Decode(const std::string& text) {
  JobState state;
  try {
    const json doc = json::parse(text);
    state.input = doc.at("input").get<std::string>();
    state.output = doc.at("output").get<std::string>();
    ClaimsJobSummary& s = state.summary;
    const std::string state_name = doc.at("state").get<std::string>();
    const std::optional<ClaimsJobState> parsed_state = ParseClaimsJobState(state_name);
    if (!parsed_state) return DataLoss("a claims job record is malformed: unknown state \"" + state_name + "\"");
    s.state = *parsed_state;
    state.error = doc.value("error", std::string());
    state.restart = doc.value("restart", false);
    // Records of jobs that have not begun (and of earlier versions) lack what follows.
    state.input_sha256 = doc.value("input_sha256", std::string());
    state.input_version = doc.value("input_version", std::string());
    state.chunk_size = doc.value("chunk_size", 0);
    state.total = doc.value("total", int64_t{0});
    state.rows_done = doc.value("rows_done", int64_t{0});
    state.output_bytes = doc.value("output_bytes", int64_t{0});
    s.errors = doc.value("errors", int64_t{0});
    s.analysed = doc.value("analysed", int64_t{0});
    s.llm_selected = doc.value("llm_selected", int64_t{0});
    s.llm_shortfalls = doc.value("llm_shortfalls", std::map<std::string, int64_t>());
    s.decisions = doc.value("decisions", std::map<std::string, int64_t>());
    s.flags = doc.value("flags", std::map<std::string, int64_t>());
    s.stage_us = doc.value("stage_us", std::map<std::string, int64_t>());
    s.devices = doc.value("devices", std::map<std::string, std::string>());
    s.elapsed_s = doc.value("elapsed_s", 0.0);
    s.runs = doc.value("runs", 0);
    s.pipeline_digests = doc.value("pipeline_digests", std::vector<std::string>());
  } catch (const json::exception& e) {
    return DataLoss(std::string("a claims job record is malformed: ") + e.what());
  }
  return state;
}

std::string ClaimsJobKey(const std::string& job_id) { return kJobKeyPrefix + job_id; }

Status SaveState(storage::Database& db, const std::string& key, const JobState& state) {
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kJobs, key, state.Encode());
  return db.Write(batch);
}

Result<std::optional<ClaimsJobRecord>> ReadClaimsJob(storage::Database& db, const std::string& job_id) {
  TXSCORE_ASSIGN_OR_RETURN(const std::optional<std::string> stored,
                           db.Get(storage::ColumnFamily::kJobs, ClaimsJobKey(job_id)));
  if (!stored.has_value()) return std::optional<ClaimsJobRecord>();
  TXSCORE_ASSIGN_OR_RETURN(ClaimsJobRecord record, DecodeRecord(*stored));
  return std::optional<ClaimsJobRecord>(std::move(record));
}

Result<std::map<std::string, ClaimsJobRecord>> ListClaimsJobs(storage::Database& db) {
  const std::string_view prefix = kJobKeyPrefix;
  std::map<std::string, ClaimsJobRecord> jobs;
  Status decoded = Status::Ok();
  // Only the jobs' keys: the providers' histories, under their own prefix, may be many.
  TXSCORE_RETURN_IF_ERROR(
      db.ScanForward(storage::ColumnFamily::kJobs, prefix, [&](std::string_view key, std::string_view value) {
        if (key.substr(0, prefix.size()) != prefix) return false;
        Result<ClaimsJobRecord> record = DecodeRecord(std::string(value));
        if (!record.ok()) {
          decoded = record.error();
          return false;
        }
        jobs.emplace(std::string(key.substr(prefix.size())), std::move(record).value());
        return true;
      }));
  TXSCORE_RETURN_IF_ERROR(decoded);
  return jobs;
}

Result<fraud::ProviderClaimsHistory> ReadProviderHistory(storage::Database& db, const std::string& provider_id) {
  TXSCORE_ASSIGN_OR_RETURN(const std::optional<std::string> stored,
                           db.Get(storage::ColumnFamily::kJobs, kProviderKeyPrefix + provider_id));
  if (!stored.has_value()) return fraud::ProviderClaimsHistory();
  Result<fraud::ProviderClaimsHistory> history = fraud::ProviderClaimsHistory::Decode(*stored);
  if (!history.ok()) return DataLoss("provider " + provider_id + ": " + history.error().message);
  return history;
}

Result<std::map<std::string, fraud::ProviderClaimsHistory>> RecordProviderClaims(
    storage::Database& db, const std::map<std::string, std::vector<ProviderClaim>>& claims) {
  std::lock_guard<std::mutex> lock(ProviderHistoryMutex());
  std::map<std::string, fraud::ProviderClaimsHistory> histories;
  storage::WriteBatch batch;
  for (const auto& [provider_id, provider_claims] : claims) {
    TXSCORE_ASSIGN_OR_RETURN(fraud::ProviderClaimsHistory history, ReadProviderHistory(db, provider_id));
    bool added = false;
    for (const ProviderClaim& claim : provider_claims)
      added = history.Add(claim.claim_digest, claim.report_day) || added;
    if (added) {
      fraud::ProviderClaimsHistory kept = history;
      kept.Prune();
      batch.Put(storage::ColumnFamily::kJobs, kProviderKeyPrefix + provider_id, kept.Encode());
    }
    histories.emplace(provider_id, std::move(history));
  }
  TXSCORE_RETURN_IF_ERROR(db.Write(batch));
  return histories;
}

std::string ShortDigest(const std::string& text) {
  Result<std::string> digest = Sha256Hex(text);
  if (!digest.ok()) {
    // Only an allocation failure inside OpenSSL gets here. A made-up digest would give two
    // jobs one id (and one output file): stop instead.
    Log("claims").critical("cannot name a claims job: {}", digest.error().ToString());
    std::abort();
  }
  return digest->substr(0, 16);
}

std::string ClaimsJobId(const std::string& input_path, const std::string& output_path,
                        const std::set<int64_t>& only_lines, const std::string& shard) {
  std::string identity = input_path + "\n" + output_path;
  if (!only_lines.empty()) {
    identity += "\nlines";
    for (int64_t line : only_lines) identity += " " + std::to_string(line);
  }
  if (!shard.empty()) identity += "\nshard " + shard;
  return ShortDigest(identity);
}

Status SetClaimsJobState(storage::Database& db, const std::string& input, const std::string& output,
                         ClaimsJobState state, const std::string& error, bool restart) {
  const std::string key = ClaimsJobKey(ClaimsJobId(input, output));
  Result<std::optional<std::string>> stored = db.Get(storage::ColumnFamily::kJobs, key);
  if (!stored.ok()) return stored.error();
  JobState job;
  if (stored->has_value()) {
    Result<JobState> decoded = JobState::Decode(**stored);
    if (!decoded.ok()) return decoded.error();
    job = std::move(decoded).value();
  } else {
    job.input = input;
    job.output = output;
  }
  job.summary.state = state;
  job.error = error;
  job.restart = restart;
  return SaveState(db, key, job);
}

}  // namespace txscore::pipelines
