#include "pipelines/claims_merge.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/durable_file.h"
#include "pipelines/claims_job.h"

namespace txscore::pipelines {
namespace {

using json = nlohmann::json;

struct ShardOutput {
  std::string path;
  ClaimsShard shard;
  json summary;
  std::ifstream in;
  int64_t file_line = 0;   // lines of this file read
  int64_t input_line = 0;  // the input line of the current output line
  std::string text;        // the current output line; empty at the end
  bool is_error = false;   // the current line is an error line
};

Error Refuse(const std::string& message) { return InvalidArgument(message, "shards"); }

// fsync of a file written through a stream (which cannot sync).
Status SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open " + path + " to sync it");
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced ? Status::Ok() : Internal("cannot sync " + path);
}

// The next line of `shard`'s output, or false at its end. The line's "line" must grow.
Result<bool> Advance(ShardOutput& shard) {
  if (!std::getline(shard.in, shard.text)) {
    shard.text.clear();
    return false;
  }
  ++shard.file_line;
  const json row = json::parse(shard.text, nullptr, /*allow_exceptions=*/false);
  if (!row.is_object() || !row.contains("line") || !row["line"].is_number_integer()) {
    return Refuse(shard.path + ":" + std::to_string(shard.file_line) +
                  ": not a line of a txscore batch run output (a JSON object with \"line\")");
  }
  const int64_t line = row["line"].get<int64_t>();
  if (line <= shard.input_line) {
    return Refuse(shard.path + ":" + std::to_string(shard.file_line) + ": input line " + std::to_string(line) +
                  " comes after line " + std::to_string(shard.input_line) + ": not in input order");
  }
  shard.input_line = line;
  shard.is_error = row.contains("error");
  return true;
}

// Adds `from`'s numbers into `into`, key by key (maps of counts).
void AddCounts(const json& from, json* into) {
  if (!from.is_object()) return;
  for (const auto& [key, value] : from.items()) {
    if (value.is_number_integer()) (*into)[key] = into->value(key, int64_t{0}) + value.get<int64_t>();
  }
}

}  // namespace

Result<ClaimsMergeSummary> MergeShardOutputs(const std::vector<std::string>& shard_outputs, const std::string& output,
                                             bool replace_existing) {
  if (shard_outputs.empty()) return Refuse("no shard outputs to merge");
  std::vector<ShardOutput> shards(shard_outputs.size());
  std::error_code ec;
  // A link counts as there even when it points nowhere.
  for (const std::string& existing : {output, output + ".summary.json"}) {
    if (!replace_existing &&
        std::filesystem::symlink_status(existing, ec).type() != std::filesystem::file_type::not_found) {
      return FailedPrecondition(existing + " exists: merge into a new file, or give --force to replace it");
    }
  }
  const std::string output_path = std::filesystem::absolute(output, ec).lexically_normal().string();
  for (size_t i = 0; i < shard_outputs.size(); ++i) {
    ShardOutput& s = shards[i];
    s.path = shard_outputs[i];
    if (std::filesystem::absolute(s.path, ec).lexically_normal().string() == output_path) {
      return Refuse("the merged output " + output + " must not be one of the shards' outputs");
    }
    std::ifstream summary_file(s.path + ".summary.json");
    if (!summary_file) {
      // Written when a run ends: a shard stopped part-way has none yet.
      return Refuse(s.path + ".summary.json is missing: " + s.path +
                    " is not done (run its shard again to finish it) or is no batch run output");
    }
    s.summary = json::parse(summary_file, nullptr, /*allow_exceptions=*/false);
    if (!s.summary.is_object() || !s.summary.contains("shard") || !s.summary["shard"].is_string()) {
      return Refuse(s.path + " is not the output of a shard (its summary names no \"shard\": run with --shard I/N)");
    }
    if (s.summary.value("state", "") != "done") {
      return Refuse(s.path + " is not done (its summary says \"" + s.summary.value("state", "") +
                    "\"): run its shard again to finish it");
    }
    Result<ClaimsShard> shard = ClaimsShard::Parse(s.summary["shard"].get<std::string>());
    if (!shard.ok()) return Refuse(s.path + ".summary.json: " + shard.error().message);
    s.shard = *shard;
    const ShardOutput& first = shards[0];
    if (s.summary.value("input", "") != first.summary.value("input", "") ||
        s.summary.value("input_sha256", "") != first.summary.value("input_sha256", "")) {
      return Refuse(s.path + " is a shard of " + s.summary.value("input", "?") + " (SHA-256 " +
                    s.summary.value("input_sha256", "?").substr(0, 12) + "...), " + first.path + " of " +
                    first.summary.value("input", "?") + " (" + first.summary.value("input_sha256", "?").substr(0, 12) +
                    "...)");
    }
    if (s.shard.count != first.shard.count || s.shard.contiguous != first.shard.contiguous) {
      return Refuse(s.path + " is shard " + s.shard.Name() + ", " + first.path + " shard " + first.shard.Name() +
                    ": not the same split");
    }
    s.in.open(s.path);
    if (!s.in) return Refuse("cannot read " + s.path);
  }
  std::map<int, std::string> by_index;
  for (const ShardOutput& s : shards) {
    if (!by_index.emplace(s.shard.index, s.path).second) {
      return Refuse("shard " + s.shard.Name() + " is given twice: " + by_index[s.shard.index] + " and " + s.path);
    }
  }
  const int count = shards[0].shard.count;
  for (int i = 0; i < count; ++i) {
    if (by_index.count(i) == 0) {
      return Refuse("shard " + std::to_string(i) + "/" + std::to_string(count) +
                    " is missing: merge needs the outputs of all " + std::to_string(count) + " shards");
    }
  }

  // A k-way merge by input line, into a temporary file renamed over OUTPUT at the end.
  const std::string temporary = output + ".merging";
  std::ofstream out(temporary, std::ios::trunc);
  if (!out) return Internal("cannot write " + temporary);
  ClaimsMergeSummary merged;
  merged.shards = count;
  std::vector<bool> open(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    Result<bool> more = Advance(shards[i]);
    if (!more.ok()) return more.error();
    open[i] = *more;
  }
  for (;;) {
    int next = -1;
    for (size_t i = 0; i < shards.size(); ++i) {
      if (open[i] && (next < 0 || shards[i].input_line < shards[static_cast<size_t>(next)].input_line)) {
        next = static_cast<int>(i);
      }
    }
    if (next < 0) break;
    ShardOutput& s = shards[static_cast<size_t>(next)];
    for (size_t i = 0; i < shards.size(); ++i) {
      if (static_cast<int>(i) != next && open[i] && shards[i].input_line == s.input_line) {
        return Refuse("input line " + std::to_string(s.input_line) + " is in both " + s.path + " and " +
                      shards[i].path);
      }
    }
    out << s.text << "\n";
    ++merged.lines;
    if (s.is_error) ++merged.errors;
    Result<bool> more = Advance(s);
    if (!more.ok()) return more.error();
    open[static_cast<size_t>(next)] = *more;
  }
  out.close();
  if (!out) return Internal("cannot write " + temporary);
  TXSCORE_RETURN_IF_ERROR(SyncFile(temporary));

  json summary = {{"merged_from", json::array()},
                  {"input", shards[0].summary.value("input", "")},
                  {"input_sha256", shards[0].summary.value("input_sha256", "")},
                  {"state", "done"},
                  {"lines", merged.lines}};
  json totals = json::object(), decisions = json::object(), shortfalls = json::object(), digests = json::array();
  for (int i = 0; i < count; ++i) {
    const ShardOutput& s =
        *std::find_if(shards.begin(), shards.end(), [i](const ShardOutput& shard) { return shard.shard.index == i; });
    summary["merged_from"].push_back({{"shard", s.shard.Name()}, {"output", s.path}});
    json numbers = json::object();
    for (const char* key : {"total", "done", "errors", "llm_selected", "analysed"})
      numbers[key] = s.summary.value(key, 0);
    AddCounts(numbers, &totals);
    AddCounts(s.summary.value("decisions", json::object()), &decisions);
    AddCounts(s.summary.value("llm_shortfalls", json::object()), &shortfalls);
    // Every pipeline that decided a row of the merged output, once each.
    for (const json& digest : s.summary.value("pipeline_digests", json::array())) {
      if (std::find(digests.begin(), digests.end(), digest) == digests.end()) digests.push_back(digest);
    }
  }
  summary["pipeline_digests"] = digests;
  summary.update(totals);
  summary["decisions"] = decisions;
  summary["llm_shortfalls"] = shortfalls;
  {
    std::ofstream summary_out(output + ".summary.json.tmp", std::ios::trunc);
    summary_out << summary.dump(2) << "\n";
    if (!summary_out) return Internal("cannot write " + output + ".summary.json");
  }
  // The output first, then its summary: a summary beside an output always describes it.
  // Without replace_existing, a file that appeared since the check above is not replaced
  // either (renameat2's RENAME_NOREPLACE makes check and rename one step).
  const unsigned int flags = replace_existing ? 0 : RENAME_NOREPLACE;
  for (const auto& [from, to] :
       {std::pair{temporary, output}, std::pair{output + ".summary.json.tmp", output + ".summary.json"}}) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags) != 0) {
      const int error = errno;
      std::filesystem::remove(temporary, ec);
      std::filesystem::remove(output + ".summary.json.tmp", ec);
      if (error == EEXIST)
        return FailedPrecondition(to + " exists: merge into a new file, or give --force to replace it");
      return Internal("cannot write " + to + ": " + std::strerror(error));
    }
  }
  const std::filesystem::path parent = std::filesystem::absolute(output, ec).parent_path();
  TXSCORE_RETURN_IF_ERROR(SyncDirectory(parent.string()));
  return merged;
}

}  // namespace txscore::pipelines
