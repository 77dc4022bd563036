#include "service/shard_transfer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/durable_file.h"
#include "common/sha256.h"
#include "fraud/entity_state.h"

namespace txscore::service {
namespace {

using Json = nlohmann::json;

constexpr char kFormat[] = "txscore-card-state";
constexpr int kVersion = 1;
constexpr std::string_view kMovedTo = "moved-to:";  // a re-keying marker (pipelines/scoring_pipeline.cc)

// SHA-256 over lines fed one at a time.
class LineDigest {
 public:
  LineDigest() : context_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr);
  }
  void Add(std::string_view line) {
    EVP_DigestUpdate(context_.get(), line.data(), line.size());
    EVP_DigestUpdate(context_.get(), "\n", 1);
  }
  std::string Hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(context_.get(), digest, &length);
    return HexOfBytes(std::string_view(reinterpret_cast<const char*>(digest), length));
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context_;
};

Result<std::string> BytesOfHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("state_hex has an odd number of digits");
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int value = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = hex[j];
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return InvalidArgument("state_hex is not lowercase hex");
      value = value * 16 + digit;
    }
    bytes.push_back(static_cast<char>(value));
  }
  return bytes;
}

// One export file, read and checked whole: its header, and its cards in file order.
struct ExportFile {
  std::string path;
  std::string shard;
  std::vector<std::string> shards;
  std::vector<std::pair<std::string, std::string>> cards;  // token, stored bytes (only those kept)
};

// Reads `path`, keeping the cards `keep` says yes to. Refuses a file that is not an export, is
// cut short (no trailer) or whose card lines do not match the trailer's count and digest.
Result<ExportFile> ReadExport(const std::string& path, const std::function<bool(const std::string&)>& keep) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open " + path);
  ExportFile file;
  file.path = path;
  std::string line;
  int64_t number = 0, cards = 0;
  bool ended = false;
  LineDigest digest;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (ended) return InvalidArgument(where + "lines after the trailer");
    Json doc = Json::parse(line, nullptr, false);
    if (!doc.is_object()) return InvalidArgument(where + "not a JSON object");
    if (number == 1) {
      if (doc.value("format", "") != kFormat || doc.value("version", 0) != kVersion || !doc["shard"].is_string() ||
          !doc["shards"].is_array()) {
        return InvalidArgument(where + "not a txscore card-state export (txscore shard export writes them)");
      }
      file.shard = doc["shard"];
      for (const Json& name : doc["shards"]) {
        if (!name.is_string()) return InvalidArgument(where + "shards must be names");
        file.shards.push_back(name);
      }
      continue;
    }
    if (doc.contains("end")) {
      if (!doc["cards"].is_number_integer() || doc["cards"].get<int64_t>() != cards ||
          doc.value("sha256", "") != digest.Hex()) {
        return InvalidArgument(where + "the trailer does not match the card lines: the file was altered");
      }
      ended = true;
      continue;
    }
    if (!doc["card_token"].is_string() || !doc["state_hex"].is_string()) {
      return InvalidArgument(where + "a card line has card_token and state_hex");
    }
    digest.Add(line);
    ++cards;
    const std::string token = doc["card_token"];
    if (!keep(token)) continue;
    Result<std::string> bytes = BytesOfHex(doc["state_hex"]);
    if (!bytes.ok()) return InvalidArgument(where + bytes.error().message);
    file.cards.emplace_back(token, std::move(bytes).value());
  }
  if (number == 0) return InvalidArgument(path + " is empty");
  if (!ended) return InvalidArgument(path + " has no trailer: it was cut short (export it again)");
  return file;
}

}  // namespace

Result<ExportSummary> ExportCardState(const storage::Database& db, const std::string& shard,
                                      const std::vector<std::string>& shards, const std::string& out_path) {
  TXSCORE_RETURN_IF_ERROR(ValidateShardNames(shards));
  if (std::find(shards.begin(), shards.end(), shard) == shards.end()) {
    return InvalidArgument("shard " + shard + " is not in its shard list");
  }
  const std::string partial = out_path + ".partial";
  const int fd = ::open(partial.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("cannot create " + partial + ": " + std::strerror(errno));
  ExportSummary summary;
  LineDigest digest;
  std::string buffer = Json{{"format", kFormat}, {"version", kVersion}, {"shard", shard}, {"shards", shards}}.dump();
  buffer += "\n";
  Status written = Status::Ok();
  Status scanned =
      db.ScanForward(storage::ColumnFamily::kEntityState, "", [&](std::string_view key, std::string_view value) {
        if (value.substr(0, kMovedTo.size()) == kMovedTo) {
          ++summary.markers_skipped;
          return true;
        }
        Result<fraud::CardState> state = fraud::DecodeCardState(value);
        if (!state.ok()) {
          written = DataLoss("the state of card " + std::string(key) + " does not decode: " + state.error().message);
          return false;
        }
        const std::string line = Json{
            {"card_token", std::string(key)},
            {"transactions", state->transaction_count},
            {"state_hex",
             HexOfBytes(value)}}.dump();
        digest.Add(line);
        buffer += line;
        buffer += "\n";
        ++summary.cards;
        if (buffer.size() > (1 << 20)) {
          written = WriteAll(fd, buffer, partial);
          buffer.clear();
        }
        return written.ok();
      });
  if (scanned.ok() && written.ok()) {
    buffer += Json{{"end", true}, {"cards", summary.cards}, {"sha256", digest.Hex()}}.dump() + "\n";
    written = WriteAll(fd, buffer, partial);
  }
  if (scanned.ok() && written.ok() && ::fsync(fd) != 0) written = Internal("cannot sync " + partial);
  ::close(fd);
  if (!scanned.ok() || !written.ok()) {
    std::filesystem::remove(partial);
    return !scanned.ok() ? scanned.error() : written.error();
  }
  std::error_code error;
  std::filesystem::rename(partial, out_path, error);
  if (error) return Internal("cannot rename " + partial + " to " + out_path + ": " + error.message());
  TXSCORE_RETURN_IF_ERROR(SyncDirectory(std::filesystem::path(out_path).parent_path().string().empty()
                                            ? "."
                                            : std::filesystem::path(out_path).parent_path().string()));
  return summary;
}

Result<ImportSummary> ImportCardState(storage::Database* db, const ShardMap& map,
                                      const std::vector<std::string>& exports) {
  if (exports.empty()) return InvalidArgument("give the export of every shard of the old set");
  // Everything is read and checked before anything is written.
  std::vector<ExportFile> files;
  std::map<std::string, std::string> seen_in;  // token -> the file that had it (owned cards only)
  for (const std::string& path : exports) {
    TXSCORE_ASSIGN_OR_RETURN(ExportFile file,
                             ReadExport(path, [&map](const std::string& token) { return map.Owns(token); }));
    if (!files.empty() && file.shards != files.front().shards) {
      return InvalidArgument(path + " is of another shard set than " + files.front().path);
    }
    for (const ExportFile& other : files) {
      if (other.shard == file.shard)
        return InvalidArgument(path + " and " + other.path + " are both of shard " + file.shard);
    }
    for (const auto& [token, bytes] : file.cards) {
      auto [at, inserted] = seen_in.emplace(token, path);
      if (!inserted) {
        return InvalidArgument("card " + token + " is in both " + at->second + " and " + path +
                               ": the old set's shards disagree about it");
      }
    }
    files.push_back(std::move(file));
  }
  std::vector<std::string> missing;
  for (const std::string& shard : files.front().shards) {
    bool given = false;
    for (const ExportFile& file : files) given = given || file.shard == shard;
    if (!given) missing.push_back(shard);
  }
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
    return InvalidArgument("the exports of shard(s) " + names + " of the old set are missing: give every shard's");
  }
  ImportSummary summary;
  summary.from_shards = files.front().shards;
  // One batch, so that the database holds the old cards or the new set, never a mix: entries of
  // cards this shard no longer owns (state and markers alike) go, the owned cards come in.
  storage::WriteBatch batch;
  TXSCORE_RETURN_IF_ERROR(
      db->ScanForward(storage::ColumnFamily::kEntityState, "", [&](std::string_view key, std::string_view) {
        if (!map.Owns(key)) {
          batch.Delete(storage::ColumnFamily::kEntityState, key);
          ++summary.removed;
        }
        return true;
      }));
  for (const ExportFile& file : files) {
    for (const auto& [token, bytes] : file.cards) {
      batch.Put(storage::ColumnFamily::kEntityState, token, bytes);
      ++summary.imported;
    }
  }
  TXSCORE_RETURN_IF_ERROR(db->Write(batch));
  return summary;
}

namespace {

constexpr char kStampFile[] = "txscore-shard.json";

std::string StampPath(const std::string& db_path) { return (std::filesystem::path(db_path) / kStampFile).string(); }

std::string Describe(const std::string& shard, const std::vector<std::string>& shards) {
  std::string names;
  for (const std::string& name : shards) names += (names.empty() ? "" : ", ") + name;
  return "shard " + shard + " of {" + names + "}";
}

std::vector<std::string> Sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Result<std::optional<ShardStamp>> ReadShardStamp(const std::string& db_path) {
  std::ifstream in(StampPath(db_path));
  if (!in) return std::optional<ShardStamp>();
  std::stringstream text;
  text << in.rdbuf();
  Json doc = Json::parse(text.str(), nullptr, false);
  if (!doc.is_object() || !doc["shard"].is_string() || !doc["shards"].is_array()) {
    return DataLoss(StampPath(db_path) + " is not a shard stamp {\"shard\", \"shards\"}");
  }
  ShardStamp stamp;
  stamp.shard = doc["shard"];
  for (const Json& name : doc["shards"]) {
    if (!name.is_string()) return DataLoss(StampPath(db_path) + ": shards must be names");
    stamp.shards.push_back(name);
  }
  stamp.shards = Sorted(std::move(stamp.shards));
  return std::optional<ShardStamp>(std::move(stamp));
}

Status WriteShardStamp(const std::string& db_path, const ShardMap& map) {
  const std::string text = Json{{"shard", map.self().name}, {"shards", Sorted(map.names())}}.dump() + "\n";
  const std::string path = StampPath(db_path);
  TXSCORE_RETURN_IF_ERROR(WriteFileDurably(path + ".partial", text, 0600));
  std::error_code error;
  std::filesystem::rename(path + ".partial", path, error);
  if (error) return Internal("cannot rename " + path + ".partial: " + error.message());
  return SyncDirectory(db_path);
}

Status CheckShardStamp(const std::string& db_path, const storage::Database& db, const ShardMap* map) {
  TXSCORE_ASSIGN_OR_RETURN(std::optional<ShardStamp> stamp, ReadShardStamp(db_path));
  if (map == nullptr) {
    if (!stamp) return Status::Ok();
    return FailedPrecondition("the database " + db_path + " is " + Describe(stamp->shard, stamp->shards) +
                              ", but these settings have no sharding section: add it, or give this server "
                              "a database of its own");
  }
  if (stamp) {
    if (stamp->shard == map->self().name && stamp->shards == Sorted(map->names())) return Status::Ok();
    return FailedPrecondition("the database " + db_path + " is " + Describe(stamp->shard, stamp->shards) + ", not " +
                              Describe(map->self().name, Sorted(map->names())) +
                              ": a changed shard set needs the reshard (txscore shard export, then import on "
                              "each new shard: docs/scaling-out.md)");
  }
  bool holds_cards = false;
  TXSCORE_RETURN_IF_ERROR(
      db.ScanForward(storage::ColumnFamily::kEntityState, "", [&](std::string_view, std::string_view) {
        holds_cards = true;
        return false;
      }));
  if (holds_cards) {
    return FailedPrecondition("the database " + db_path + " holds card state but belongs to no shard yet: make it " +
                              Describe(map->self().name, Sorted(map->names())) +
                              " with txscore shard export (with a one-shard list naming it) and import "
                              "(docs/scaling-out.md)");
  }
  return WriteShardStamp(db_path, *map);
}

}  // namespace txscore::service
