// txscore shard owner|export|import: which shard owns a card, and moving card state when a
// shard set changes size (docs/scaling-out.md, "Resharding"; service/shard_transfer.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "service/commands/commands.h"
#include "service/settings.h"
#include "service/shard_map.h"
#include "service/shard_transfer.h"
#include "storage/database.h"

namespace txscore::service {
namespace {

struct ShardOptions {
  std::string action;
  std::string config_path = "config/txscore.yaml";
  std::string shard_name;           // overrides sharding.self
  std::string shards;               // owner: comma-separated names instead of --config
  std::string out;                  // export
  std::vector<std::string> inputs;  // owner: tokens; import: export files
};

Result<ServiceSettings> ShardedSettings(const ShardOptions& options) {
  TXSCORE_ASSIGN_OR_RETURN(ServiceSettings settings, LoadServiceSettings(options.config_path));
  if (settings.sharding.shards.empty()) {
    return FailedPrecondition(options.config_path +
                              " has no sharding section: it is not a shard (docs/scaling-out.md)");
  }
  if (!options.shard_name.empty()) settings.sharding.self = options.shard_name;
  return settings;
}

Status Run(const ShardOptions& options) {
  if (options.action == "owner") {
    std::vector<std::string> names;
    if (!options.shards.empty()) {
      std::stringstream list(options.shards);
      for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    } else {
      TXSCORE_ASSIGN_OR_RETURN(ServiceSettings settings, ShardedSettings(options));
      for (const ShardEndpoint& shard : settings.sharding.shards) names.push_back(shard.name);
    }
    TXSCORE_RETURN_IF_ERROR(ValidateShardNames(names));
    if (options.inputs.empty()) return InvalidArgument("give one or more card tokens");
    for (const std::string& token : options.inputs) {
      std::printf("%s %s\n", token.c_str(), names[ShardOwnerIndex(token, names)].c_str());
    }
    return Status::Ok();
  }
  TXSCORE_ASSIGN_OR_RETURN(ServiceSettings settings, ShardedSettings(options));
  TXSCORE_ASSIGN_OR_RETURN(ShardMap map, ShardMap::Create(settings.sharding.shards, settings.sharding.self));
  if (options.action == "export") {
    if (options.out.empty()) return InvalidArgument("--out FILE is required");
    // A path that names no database (a typo, a volume not mounted) would export 0 cards and
    // drop the shard's cards at import: refused, as is a database of another shard or set.
    if (!std::filesystem::exists(settings.storage.path)) {
      return NotFound("no database at " + settings.storage.path + " (storage.path of " + options.config_path +
                      "): is the shard's volume mounted?");
    }
    std::vector<std::string> names = map.names();
    std::sort(names.begin(), names.end());
    TXSCORE_ASSIGN_OR_RETURN(std::optional<ShardStamp> stamp, ReadShardStamp(settings.storage.path));
    if (stamp && (stamp->shard != map.self().name || stamp->shards != names)) {
      std::string list;
      for (const std::string& name : stamp->shards) list += (list.empty() ? "" : ", ") + name;
      return FailedPrecondition(settings.storage.path + " is the database of shard " + stamp->shard + " of {" + list +
                                "}: export it with the settings of that set (the old shard list)");
    }
    if (!stamp && names.size() > 1) {
      return FailedPrecondition(settings.storage.path +
                                " belongs to no shard (no shard stamp): an unsharded server's database is exported "
                                "with a one-shard list naming it");
    }
    // Opened for writing, which takes RocksDB's lock: a shard still serving is refused, since
    // what it writes after the export would be lost by the reshard.
    Result<std::unique_ptr<storage::Database>> db = storage::Database::Open(settings.storage.path);
    if (!db.ok()) {
      return FailedPrecondition("cannot open " + settings.storage.path + " (" + db.error().message +
                                "): stop this shard's txscore serve before exporting");
    }
    TXSCORE_ASSIGN_OR_RETURN(ExportSummary summary, ExportCardState(**db, map.self().name, map.names(), options.out));
    std::printf("exported %lld cards of shard %s to %s (%lld re-keying markers left out)\n",
                static_cast<long long>(summary.cards), map.self().name.c_str(), options.out.c_str(),
                static_cast<long long>(summary.markers_skipped));
    return Status::Ok();
  }
  // import
  if (options.inputs.empty()) return InvalidArgument("give the export file of every shard of the old set");
  Result<std::unique_ptr<storage::Database>> db = storage::Database::Open(settings.storage.path);
  if (!db.ok()) {
    return FailedPrecondition("cannot open " + settings.storage.path + " (" + db.error().message +
                              "): stop this shard's txscore serve before importing");
  }
  TXSCORE_ASSIGN_OR_RETURN(ImportSummary summary, ImportCardState(db->get(), map, options.inputs));
  TXSCORE_RETURN_IF_ERROR((*db)->Close());
  TXSCORE_RETURN_IF_ERROR(WriteShardStamp(settings.storage.path, map));
  std::string from;
  for (const std::string& name : summary.from_shards) from += (from.empty() ? "" : ",") + name;
  std::printf(
      "shard %s of %zu: %lld cards imported from the exports of %s; %lld entries of cards other shards own "
      "removed\n",
      map.self().name.c_str(), map.shards().size(), static_cast<long long>(summary.imported), from.c_str(),
      static_cast<long long>(summary.removed));
  return Status::Ok();
}

}  // namespace

void AddShardCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<ShardOptions>();
  CLI::App* cmd = app.add_subcommand("shard", "Which shard owns a card; move card state between shard sets");
  cmd->require_subcommand(1);
  CLI::App* owner = cmd->add_subcommand("owner", "Print the shard that owns each card token");
  owner->add_option("--shards", options->shards, "Shard names, comma-separated (instead of --config)");
  owner->add_option("tokens", options->inputs, "Card tokens")->required();
  CLI::App* exporter = cmd->add_subcommand("export", "Write this (stopped) shard's card state to a file");
  exporter->add_option("--out", options->out, "The export file (written whole, or not at all)")->required();
  CLI::App* importer = cmd->add_subcommand(
      "import", "Give this (stopped) shard of the new set the cards it owns, from every old shard's export");
  importer->add_option("exports", options->inputs, "Export files, one per shard of the old set")->required();
  for (CLI::App* sub : {owner, exporter, importer}) {
    sub->add_option("--config", options->config_path, "Service settings file with a sharding section")
        ->capture_default_str();
    if (sub != owner)
      sub->add_option("--shard-name", options->shard_name, "This shard's name (default: sharding.self)");
    sub->callback([options, exit_code, sub] {
      options->action = sub->get_name();
      Status status = Run(*options);
      if (!status.ok()) {
        std::fprintf(stderr, "txscore shard %s: %s\n", sub->get_name().c_str(), status.error().ToString().c_str());
        *exit_code = status.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
        return;
      }
      *exit_code = 0;
    });
  }
}

}  // namespace txscore::service
