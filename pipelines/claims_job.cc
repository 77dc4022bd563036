#include "pipelines/claims_job.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "common/durable_file.h"
#include "common/sha256.h"
#include "fraud/pan_scan.h"

namespace txscore::pipelines {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using SteadyClock = std::chrono::steady_clock;

// Rows per chunk: at least 64, and 8 LLM batches' worth, since only the suspicious share of a
// chunk (often a tenth) reaches the LLM and its batches should still fill.
constexpr int kMinChunk = 64;
constexpr int kChunkBatches = 8;
constexpr char kJobKeyPrefix[] = "claims-job/";

// One input row: where it starts, and the claim or why there is none.
struct Row {
  int64_t line = 0;
  Result<fraud::RawClaim> claim = InvalidArgument("unread");
};

// Reads rows from a JSON-lines or CSV claims file, in time linear in its size. A row (a JSON
// line, or a CSV record with its quoted newlines) longer than kMaxRowBytes becomes an error
// row and is skipped. `should_stop` (optional), checked at every line, ends the reading early
// when it returns true (stopped() says so): a stop needs no row to end.
class RowReader {
 public:
  static constexpr size_t kMaxRowBytes = 1 << 20;

  static Result<RowReader> Open(const std::string& path, std::function<bool()> should_stop = nullptr) {
    RowReader reader;
    reader.should_stop_ = std::move(should_stop);
    reader.csv_ = fs::path(path).extension() == ".csv";
    reader.in_.open(path, std::ios::binary);
    if (!reader.in_) return NotFound("input file " + path + " does not exist or cannot be read");
    // A UTF-8 byte order mark (as spreadsheet programs write) is not part of the first row.
    char bom[3] = {0, 0, 0};
    reader.in_.read(bom, 3);
    if (!(reader.in_.gcount() == 3 && bom[0] == '\xEF' && bom[1] == '\xBB' && bom[2] == '\xBF')) {
      reader.in_.clear();
      reader.in_.seekg(0);
    }
    if (reader.csv_) {
      std::optional<CsvRecord> header = reader.NextCsvRecord();
      if (!header || header->too_long) return InvalidArgument(path + ": the CSV file has no header row");
      Result<fraud::ClaimCsvHeader> parsed = fraud::ClaimCsvHeader::Parse(header->fields);
      if (!parsed.ok()) return InvalidArgument(path + ":1: " + parsed.error().message, parsed.error().field);
      reader.header_ = std::move(parsed).value();
    }
    return reader;
  }

  // False at the end of the input, or when stopped.
  bool Next(Row* row) {
    if (csv_) {
      std::optional<CsvRecord> record = NextCsvRecord();
      if (!record) return false;
      row->line = record->first_line;
      row->claim = record->too_long ? TooLong() : header_->Read(record->fields);
      return true;
    }
    std::string text;
    while (std::getline(in_, text)) {
      ++line_;
      if (StopAsked()) return false;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
      row->line = line_;
      row->claim = text.size() > kMaxRowBytes ? TooLong() : fraud::ParseClaimJson(text);
      return true;
    }
    return false;
  }

  bool stopped() const { return stopped_; }

 private:
  struct CsvRecord {
    int64_t first_line = 0;
    std::vector<std::string> fields;
    bool too_long = false;  // over kMaxRowBytes: skipped, fields empty
  };

  RowReader() = default;

  static Result<fraud::RawClaim> TooLong() {
    return InvalidArgument("the row is longer than " + std::to_string(kMaxRowBytes) +
                           " bytes (in a CSV file: is a quote left open?)");
  }

  bool StopAsked() {
    if (!stopped_ && should_stop_ && should_stop_()) stopped_ = true;
    return stopped_;
  }

  // The next record: lines are added while a quote is open, which a running count of quote
  // characters tells (an escaped quote is two), so each line is scanned once.
  std::optional<CsvRecord> NextCsvRecord() {
    CsvRecord out;
    std::string record, text;
    bool started = false, in_quotes = false;
    while (std::getline(in_, text)) {
      ++line_;
      if (StopAsked()) return std::nullopt;
      if (!started && text.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (!started) out.first_line = line_;
      for (char c : text) in_quotes = in_quotes != (c == '"');
      if (!out.too_long) {
        if (started) record += '\n';
        record += text;
        if (record.size() > kMaxRowBytes) {
          out.too_long = true;
          std::string().swap(record);
        }
      }
      started = true;
      if (!in_quotes) break;
    }
    if (!started) return std::nullopt;
    if (!out.too_long) {
      bool complete = false;  // false only for an unclosed quote at the end of the file
      out.fields = fraud::SplitCsvRecord(record, &complete);
    }
    return out;
  }

  std::ifstream in_;
  bool csv_ = false;
  int64_t line_ = 0;
  std::optional<fraud::ClaimCsvHeader> header_;
  std::function<bool()> should_stop_;
  bool stopped_ = false;
};

// What RocksDB keeps about a job between runs. A record without input_sha256 is of a job that
// has not begun (queued, or failed before it began): only its paths and state mean anything.
struct JobState {
  std::string input, output, input_sha256;
  int chunk_size = 0;
  int64_t total = 0, rows_done = 0, output_bytes = 0;
  std::string error;     // state "failed": why
  bool restart = false;  // state "queued": to start over
  ClaimsJobSummary summary;

  bool begun() const { return !input_sha256.empty(); }

  std::string Encode() const {
    const ClaimsJobSummary& s = summary;
    json doc = {{"input", input},
                {"output", output},
                {"input_sha256", input_sha256},
                {"chunk_size", chunk_size},
                {"total", total},
                {"rows_done", rows_done},
                {"output_bytes", output_bytes},
                {"state", s.state},
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
                {"runs", s.runs}};
    return doc.dump();
  }

  static Result<JobState> Decode(const std::string& text) {
    JobState state;
    try {
      const json doc = json::parse(text);
      state.input = doc.at("input").get<std::string>();
      state.output = doc.at("output").get<std::string>();
      ClaimsJobSummary& s = state.summary;
      s.state = doc.at("state").get<std::string>();
      state.error = doc.value("error", std::string());
      state.restart = doc.value("restart", false);
      // Records of jobs that have not begun (and of earlier versions) lack what follows.
      state.input_sha256 = doc.value("input_sha256", std::string());
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
    } catch (const json::exception& e) {
      return DataLoss(std::string("a claims job record is malformed: ") + e.what());
    }
    return state;
  }
};

Status SaveState(storage::Database& db, const std::string& key, const JobState& state) {
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kJobs, key, state.Encode());
  return db.Write(batch);
}

json ReasonsJson(const std::vector<Reason>& reasons) {
  json out = json::array();
  for (const Reason& r : reasons) {
    out.push_back({{"feature", r.feature},
                   {"contribution", r.contribution},
                   {"value", std::isnan(r.value) ? json(nullptr) : json(r.value)}});
  }
  return out;
}

std::string OutcomeLine(int64_t line, const ClaimOutcome& o) {
  json doc = {{"line", line},
              {"claim_id", o.claim_id},
              {"score", o.score},
              {"decision", DecisionName(o.decision)},
              {"reasons", ReasonsJson(o.reasons)}};
  json rule_hits = json::array();
  for (const RuleHit& hit : o.rule_hits) {
    rule_hits.push_back({{"rule", hit.rule}, {"decision", hit.decision ? json(DecisionName(*hit.decision)) : json()}});
  }
  doc["rule_hits"] = rule_hits;
  if (o.findings) {
    doc["findings"] = {{"risk_level", o.findings->risk_level},
                       {"flags", o.findings->flags},
                       {"summary", o.findings->summary},
                       {"model_id", o.findings->model_id}};
  } else {
    doc["findings"] = nullptr;
  }
  json scores = json::object(), devices = json::object(), timings = json::object();
  for (const auto& [stage, score] : o.stage_scores) scores[stage] = score;
  for (const auto& [stage, device] : o.devices) devices[stage] = device;
  for (const StageTiming& t : o.timings) timings[t.stage] = t.elapsed_us;
  doc["stage_scores"] = scores;
  doc["devices"] = devices;
  json shortfalls = json::array();
  for (const LlmShortfall& s : o.llm_shortfalls) {
    shortfalls.push_back({{"stage", s.stage}, {"reason", s.reason}, {"detail", s.detail}});
  }
  doc["llm_shortfalls"] = shortfalls;
  doc["timings"] = timings;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string ErrorLine(int64_t line, const Error& error) {
  // Messages may quote a row's own values: card numbers in them are redacted, as in free text.
  json doc = {{"line", line}, {"error", fraud::RedactPans(error.message)}};
  if (!error.field.empty()) doc["field"] = error.field;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Status WriteSummaryFile(const std::string& output_path, const ClaimsJobSummary& summary) {
  const std::string path = output_path + ".summary.json";
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << summary.ToJson() << "\n";
    if (!out) return Internal("cannot write " + path);
  }
  std::error_code ec;
  fs::rename(path + ".tmp", path, ec);
  if (ec) return Internal("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

namespace {

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
  return record;
}

}  // namespace

Result<std::optional<ClaimsJobRecord>> ReadClaimsJob(storage::Database& db, const std::string& job_id) {
  TXSCORE_ASSIGN_OR_RETURN(const std::optional<std::string> stored,
                           db.Get(storage::ColumnFamily::kJobs, kJobKeyPrefix + job_id));
  if (!stored.has_value()) return std::optional<ClaimsJobRecord>();
  TXSCORE_ASSIGN_OR_RETURN(ClaimsJobRecord record, DecodeRecord(*stored));
  return std::optional<ClaimsJobRecord>(std::move(record));
}

Result<std::map<std::string, ClaimsJobRecord>> ListClaimsJobs(storage::Database& db) {
  TXSCORE_ASSIGN_OR_RETURN(const auto stored, db.ReadAll(storage::ColumnFamily::kJobs));
  const std::string_view prefix = kJobKeyPrefix;
  std::map<std::string, ClaimsJobRecord> jobs;
  for (const auto& [key, value] : stored) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    TXSCORE_ASSIGN_OR_RETURN(ClaimsJobRecord record, DecodeRecord(value));
    jobs.emplace(key.substr(prefix.size()), std::move(record));
  }
  return jobs;
}

std::string ShortDigest(const std::string& text) {
  Result<std::string> digest = Sha256Hex(text);
  if (!digest.ok()) {
    // Only an allocation failure inside OpenSSL gets here. A made-up digest would give two
    // jobs one id (and one output file): stop instead.
    spdlog::critical("cannot name a claims job: {}", digest.error().ToString());
    std::abort();
  }
  return digest->substr(0, 16);
}

std::string ClaimsJobId(const std::string& input_path, const std::string& output_path,
                        const std::set<int64_t>& only_lines) {
  std::string identity = input_path + "\n" + output_path;
  if (!only_lines.empty()) {
    identity += "\nlines";
    for (int64_t line : only_lines) identity += " " + std::to_string(line);
  }
  return ShortDigest(identity);
}

Status SetClaimsJobState(storage::Database& db, const std::string& input, const std::string& output,
                         const std::string& state, const std::string& error, bool restart) {
  const std::string key = kJobKeyPrefix + ClaimsJobId(input, output);
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

int BatchRunExitCode(const ClaimsJobSummary& summary, double max_error_share, double max_llm_shortfall_share) {
  if (summary.errors == summary.total) return 3;  // no row scored, an empty input included
  if (static_cast<double>(summary.errors) > max_error_share * static_cast<double>(summary.total)) return 3;
  if (summary.LlmShortfallShare() > max_llm_shortfall_share) return 4;
  return 0;
}

int64_t ClaimsJobSummary::llm_shortfall_total() const {
  int64_t total = 0;
  for (const auto& [reason, claims] : llm_shortfalls) total += claims;
  return total;
}

double ClaimsJobSummary::LlmShortfallShare() const {
  return llm_selected > 0 ? static_cast<double>(llm_shortfall_total()) / static_cast<double>(llm_selected) : 0;
}

std::string ClaimsJobSummary::ToJson() const {
  json flags_by_count = json::array();
  std::vector<std::pair<std::string, int64_t>> sorted(flags.begin(), flags.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [flag, count] : sorted) flags_by_count.push_back({{"flag", flag}, {"claims", count}});
  json stages = json::object();
  for (const auto& [stage, us] : stage_us) {
    auto device = devices.find(stage);
    stages[stage] = {{"seconds", static_cast<double>(us) / 1e6},
                     {"device", device != devices.end() ? json(device->second) : json(nullptr)}};
  }
  json doc = {{"job_id", job_id},
              {"state", state},
              {"total", total},
              {"done", done},
              {"errors", errors},
              {"llm_selected", llm_selected},
              {"analysed", analysed},
              {"llm_shortfalls", llm_shortfalls},
              {"decisions", decisions},
              {"flags", flags_by_count},
              {"stages", stages},
              {"elapsed_s", elapsed_s},
              {"claims_per_s", claims_per_s()},
              {"runs", runs}};
  return doc.dump(2);
}

std::string ClaimsJobSummary::ToText() const {
  char line[256];
  std::string text;
  std::snprintf(line, sizeof line, "job %s %s: %lld of %lld rows, %lld errors, %.1f claims/s over %.1f s (%d run%s)\n",
                job_id.c_str(), state.c_str(), static_cast<long long>(done), static_cast<long long>(total),
                static_cast<long long>(errors), claims_per_s(), elapsed_s, runs, runs == 1 ? "" : "s");
  text += line;
  text += "decisions:";
  for (const auto& [decision, count] : decisions) text += " " + decision + " " + std::to_string(count);
  text += "\nLLM findings for " + std::to_string(analysed) + " of " + std::to_string(llm_selected) +
          " claims it was asked to read";
  if (llm_shortfall_total() > 0) {
    text += " (no findings:";
    for (const auto& [reason, claims] : llm_shortfalls) text += " " + reason + " " + std::to_string(claims);
    text += "; see \"llm_shortfalls\" in the output)";
  }
  text += "; most frequent flags:";
  std::vector<std::pair<std::string, int64_t>> sorted(flags.begin(), flags.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < sorted.size() && i < 5; ++i)
    text += " " + sorted[i].first + " " + std::to_string(sorted[i].second);
  text += "\ntime per stage:";
  for (const auto& [stage, us] : stage_us) {
    auto device = devices.find(stage);
    std::snprintf(line, sizeof line, " %s %.2f s%s%s;", stage.c_str(), static_cast<double>(us) / 1e6,
                  device != devices.end() ? " on " : "", device != devices.end() ? device->second.c_str() : "");
    text += line;
  }
  return text + "\n";
}

namespace {

// One run of a job whose paths, id and key RunClaimsJob worked out. `state` is what the
// database should say when this returns; `*recorded` is set once the database holds a record
// of the job (RunClaimsJob then records a failure there).
Result<ClaimsJobSummary> RunJob(ClaimsPipeline& pipeline, storage::Database& db, const ClaimsJobOptions& options,
                                const std::string& input, const std::string& output, const std::string& job_id,
                                JobState* job, bool* recorded) {
  const SteadyClock::time_point started = SteadyClock::now();
  const std::string key = kJobKeyPrefix + job_id;
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
    state.summary.state = "running";
  }
  ClaimsJobSummary& summary = state.summary;
  summary.job_id = job_id;
  if (summary.state == "done") {  // finished before: the output is complete
    summary.total = state.total;
    summary.done = state.rows_done;
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
    summary.state = cancel->load() ? "cancelled" : "interrupted";
    summary.done = state.rows_done;
    summary.elapsed_s += std::chrono::duration<double>(SteadyClock::now() - started).count();
    TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));
    *recorded = true;
    return summary;
  };
  // The rows this job scores: all, or those of options.only_lines.
  auto next_row = [&options](RowReader& reader, Row* row) {
    while (reader.Next(row)) {
      if (options.only_lines.empty() || options.only_lines.count(row->line) > 0) return true;
    }
    return false;
  };

  // First pass: count rows and claims per provider (the provider feature is over the whole
  // file). A stop asked while counting ends the count at once.
  std::map<std::string, int64_t> provider_counts;
  int64_t total = 0;
  {
    Result<RowReader> reader =
        RowReader::Open(input, [cancel, interrupt] { return cancel->load() || interrupt->load(); });
    if (!reader.ok()) return reader.error();
    Row row;
    size_t expected_found = 0;
    auto not_from_this_input = [&](const std::string& what) {
      return FailedPrecondition(fraud::RedactPans(what + ": the earlier output was not written from " + input),
                                "input");
    };
    while (reader->Next(&row)) {
      if (options.only_lines.empty() || options.only_lines.count(row.line) > 0) ++total;
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
      if (claim.ok()) ++provider_counts[claim->provider_id];
    }
    if (!reader->stopped() && expected_found < options.expected_claim_ids.size()) {
      return not_from_this_input(std::to_string(options.expected_claim_ids.size() - expected_found) + " of the " +
                                 std::to_string(options.expected_claim_ids.size()) +
                                 " lines it names are not in this input");
    }
    if (reader->stopped() || cancel->load() || interrupt->load()) {
      if (!*recorded && cancel->load()) {  // nothing of this job was written: leave nothing behind
        summary.state = "cancelled";
        return summary;
      }
      return stop();
    }
  }
  state.total = total;
  summary.total = total;
  summary.runs += 1;
  summary.state = "running";
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
  for (int64_t skipped = 0; skipped < state.rows_done && next_row(*reader, &row); ++skipped) {
  }
  ClaimsJobProgress progress{state.rows_done,       total, summary.errors, state.rows_done, summary.llm_selected,
                             summary.llm_shortfalls};
  if (options.progress) options.progress(progress);

  // Stages that run a chunk in batches report each claim its batch's time: count it once.
  std::set<std::string> batched_stages;
  for (const GraphStage& stage : pipeline.config().graph.stages()) {
    if (pipeline.FindStage(stage.name)->preferred_chunk() > 0) batched_stages.insert(stage.name);
  }
  const double elapsed_before = summary.elapsed_s;
  int64_t chunk_index = state.rows_done / state.chunk_size;
  while (state.rows_done < total) {
    if (cancel->load() || interrupt->load()) {
      summary.elapsed_s = elapsed_before;
      return stop();
    }
    std::vector<Row> rows;
    while (static_cast<int>(rows.size()) < state.chunk_size && next_row(*reader, &row)) rows.push_back(std::move(row));
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
      providers.push_back(provider_counts[claim->provider_id]);
      claims.push_back(std::move(claim).value());
    }
    if (options.before_llm) options.before_llm(chunk_index, claims.size());
    Result<std::vector<ClaimOutcome>> outcomes = pipeline.ScoreChunk(claims, providers);
    if (!outcomes.ok()) return outcomes.error();
    // The chunk's totals count only once its lines are durable: until then they go here.
    ClaimsJobSummary next = summary;
    std::string text;
    std::map<std::string, int64_t> llm_batch_us;  // an LLM stage's time is its batch's, shared by its claims
    std::map<std::string, int64_t> chunk_shortfalls;
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
      next.decisions[DecisionName(o.decision)] += 1;
      if (o.llm_selected) ++chunk_selected;
      if (o.findings) {
        next.analysed += 1;
        for (const std::string& flag : o.findings->flags) next.flags[flag] += 1;
      }
      for (const LlmShortfall& s : o.llm_shortfalls) {
        ++chunk_shortfalls[s.reason];
        if (first_shortfall.empty()) {
          first_shortfall = "line " + std::to_string(rows[r].line) + ": " + s.reason + ": " + s.detail;
        }
      }
      for (const StageTiming& t : o.timings) {
        if (batched_stages.count(t.stage) > 0) {
          llm_batch_us[t.stage] = std::max(llm_batch_us[t.stage], t.elapsed_us);
        } else {
          next.stage_us[t.stage] += t.elapsed_us;
        }
      }
      for (const auto& [stage, device] : o.devices) next.devices[stage] = device;
    }
    for (const auto& [stage, us] : llm_batch_us) next.stage_us[stage] += us;
    next.llm_selected += chunk_selected;
    for (const auto& [reason, claims_short] : chunk_shortfalls) next.llm_shortfalls[reason] += claims_short;
    if (!chunk_shortfalls.empty()) {
      std::string counts;
      for (const auto& [reason, n] : chunk_shortfalls)
        counts += (counts.empty() ? "" : ", ") + reason + " " + std::to_string(n);
      spdlog::warn(
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
  }
  summary.state = "done";
  summary.done = state.rows_done;
  summary.elapsed_s = elapsed_before + std::chrono::duration<double>(SteadyClock::now() - started).count();
  TXSCORE_RETURN_IF_ERROR(SaveState(db, key, state));
  TXSCORE_RETURN_IF_ERROR(WriteSummaryFile(output, summary));
  return summary;
}

}  // namespace

Result<ClaimsJobSummary> RunClaimsJob(ClaimsPipeline& pipeline, storage::Database& db,
                                      const ClaimsJobOptions& options) {
  if (options.input_path.empty()) return InvalidArgument("an input file is required", "input");
  if (options.output_path.empty()) return InvalidArgument("an output file is required", "output");
  std::error_code ec;
  const std::string input = fs::absolute(options.input_path, ec).lexically_normal().string();
  const std::string output = fs::absolute(options.output_path, ec).lexically_normal().string();
  if (input == output) return InvalidArgument("the output file must not be the input file", "output");
  const std::string job_id = ClaimsJobId(input, output, options.only_lines);

  JobState state;
  bool recorded = false;
  Result<ClaimsJobSummary> summary = RunJob(pipeline, db, options, input, output, job_id, &state, &recorded);
  if (!summary.ok() && recorded) {
    // The record says why the job stopped; its progress stays, so that it can resume.
    state.summary.state = "failed";
    state.error = fraud::RedactPans(summary.error().message);
    if (state.input.empty()) {
      state.input = input;
      state.output = output;
    }
    if (Status saved = SaveState(db, kJobKeyPrefix + job_id, state); !saved.ok()) {
      spdlog::error("job {}: cannot record that it failed: {}", job_id, saved.error().ToString());
    }
  }
  return summary;
}

}  // namespace txscore::pipelines
