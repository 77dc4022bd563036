// txscore audit --last N [--actions]: recent decisions (or operator actions: reloads, claims
// jobs submitted or cancelled, with who did them), newest first, one JSON object per line.
// txscore audit verify [--from T] [--public-keys F]: walks the trail's hash chain and checkpoint
// signatures (storage/audit_chain.h) and reports the first entry broken, missing, reordered or
// altered. With --public-keys (`txscore keys public`'s file) it holds no secret at all.
#include <cstdio>
#include <map>
#include <optional>

#include "common/core_dumps.h"
#include "common/sha256.h"
#include "common/utc_time.h"
#include "common/wipe.h"
#include "fraud/claim.h"
#include "fraud/keyset.h"
#include "service/commands/commands.h"
#include "service/settings.h"
#include "storage/audit_chain.h"
#include "storage/audit_log.h"
#include "storage/database.h"

namespace txscore::service {
namespace {

struct AuditOptions {
  std::string config_path = "config/txscore.yaml";
  std::string db_path;
  size_t last = 10;
  bool actions = false;
};

struct VerifyOptions {
  std::string config_path = "config/txscore.yaml";
  std::string db_path;
  std::string keyset_path;
  std::string public_keys_path;
  std::string kek_file, kek_env;
  std::string from;
};

// The keys checkpoints are verified with, by id: public keys, retirement times, and (from a
// keyset only) the HMAC secrets of checkpoints written before Ed25519.
struct VerifyingKeys {
  std::map<std::string, std::string> public_key;
  std::map<std::string, int64_t> retired_ms;
  std::map<std::string, std::string> legacy_hmac_key;
  bool from_keyset = false;
  ~VerifyingKeys() {
    for (auto& [id, secret] : legacy_hmac_key) WipeString(&secret);
  }
};

Result<VerifyingKeys> KeysFromKeyset(const fraud::Keyset& keyset) {
  VerifyingKeys keys;
  keys.from_keyset = true;
  for (const fraud::KeysetKey& key : keyset.keys()) {
    TXSCORE_ASSIGN_OR_RETURN(keys.public_key[key.id], fraud::AuditSigningPublicKey(key));
    if (key.state == fraud::KeyState::kRetired && key.retired_ms != 0) keys.retired_ms[key.id] = key.retired_ms;
    keys.legacy_hmac_key[key.id] = fraud::DeriveLegacyAuditHmacKey(key);
  }
  return keys;
}

VerifyingKeys KeysFromPublicKeys(const std::vector<fraud::AuditPublicKey>& public_keys) {
  VerifyingKeys keys;
  for (const fraud::AuditPublicKey& key : public_keys) {
    keys.public_key[key.id] = key.public_key;
    if (key.state == fraud::KeyState::kRetired && key.retired_ms != 0) keys.retired_ms[key.id] = key.retired_ms;
  }
  return keys;
}

// Exit codes of `audit verify`: the trail is intact; it is not (tampering or loss); it could not
// be checked (no database, no keys, a bad option).
// Partly: the chain is intact, but records outside it exist (written before the chain, or
// stripped of their chain fields: nothing tells which, nor whether they were changed).
constexpr int kVerifyIntact = 0, kVerifyBroken = 1, kVerifyUnchecked = 2, kVerifyPartly = 3;

// A read-only open (it may run beside a live server) of --db, or of the settings' database.
Result<std::unique_ptr<storage::Database>> OpenTrail(const std::string& db_path, const std::string& config_path,
                                                     std::string* path_out) {
  std::string path = db_path;
  if (path.empty()) {
    TXSCORE_ASSIGN_OR_RETURN(ServiceSettings settings, LoadServiceSettings(config_path));
    path = settings.storage.path;
  }
  *path_out = path;
  storage::DatabaseOptions db_options;
  db_options.read_only = true;
  return storage::Database::Open(path, db_options);
}

// "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS[Z]", UTC, as microseconds since the epoch.
Result<int64_t> ParseUtcTime(const std::string& text) {
  const std::string usage = "--from must be a UTC time YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ, not \"" + text + "\"";
  if (text.size() < 10) return InvalidArgument(usage);
  Result<int64_t> days = fraud::ParseIsoDate(text.substr(0, 10));
  if (!days.ok()) return InvalidArgument(usage);
  int64_t seconds = *days * 86400;
  std::string rest = text.substr(10);
  if (!rest.empty() && rest.back() == 'Z') rest.pop_back();
  if (!rest.empty()) {
    int hour = 0, minute = 0, second = 0;
    char tail = 0;
    if (rest.size() != 9 || std::sscanf(rest.c_str(), "T%2d:%2d:%2d%c", &hour, &minute, &second, &tail) != 3 ||
        hour < 0 || hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 59 || rest[1] == '-') {
      return InvalidArgument(usage);
    }
    seconds += hour * 3600 + minute * 60 + second;
  }
  return seconds * 1000000;
}

int RunVerify(const VerifyOptions& options) {
  // It loads the keyset (the checkpoint keys come from it): no core dump may hold it.
  if (Status hardened = KeepSecretsOutOfCoreDumps(false); !hardened.ok()) {
    std::fprintf(stderr, "%s\n", hardened.error().ToString().c_str());
    return 2;
  }
  int64_t from_time_us = 0;
  if (!options.from.empty()) {
    Result<int64_t> parsed = ParseUtcTime(options.from);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", parsed.error().message.c_str());
      return kVerifyUnchecked;
    }
    from_time_us = *parsed;
  }
  VerifyingKeys keys;
  if (!options.public_keys_path.empty()) {
    if (!options.keyset_path.empty() || !options.kek_file.empty() || !options.kek_env.empty()) {
      std::fprintf(stderr, "--public-keys verifies without the keyset: give it alone, not with --keyset or a KEK\n");
      return kVerifyUnchecked;
    }
    Result<std::vector<fraud::AuditPublicKey>> public_keys = fraud::LoadAuditPublicKeys(options.public_keys_path);
    if (!public_keys.ok()) {
      std::fprintf(stderr, "%s\n", public_keys.error().ToString().c_str());
      return kVerifyUnchecked;
    }
    keys = KeysFromPublicKeys(*public_keys);
  } else {
    // The keyset whose keys signed the checkpoints: --keyset, or the one the settings name.
    std::string keyset_path = options.keyset_path;
    fraud::KekSource kek{options.kek_file, options.kek_env};
    fraud::KeyFileForm form = fraud::KeyFileForm::kKeysetOrRawKey;
    if (keyset_path.empty()) {
      Result<ServiceSettings> settings = LoadServiceSettings(options.config_path);
      if (!settings.ok()) {
        std::fprintf(stderr, "%s\n(or name the keyset with --keyset, or the public keys with --public-keys)\n",
                     settings.error().ToString().c_str());
        return kVerifyUnchecked;
      }
      keyset_path = settings->security.key_file();
      if (kek.empty()) kek = settings->security.kek();
      form = settings->security.key_form();
    }
    Result<fraud::Keyset> keyset = fraud::LoadKeyset(keyset_path, kek, form);
    Result<VerifyingKeys> from_keyset = keyset.ok() ? KeysFromKeyset(*keyset) : Result<VerifyingKeys>(keyset.error());
    if (!from_keyset.ok()) {
      std::fprintf(stderr, "cannot read the keyset that signs the audit checkpoints: %s\n",
                   from_keyset.error().ToString().c_str());
      return kVerifyUnchecked;
    }
    keys = std::move(*from_keyset);
  }
  std::string path;
  Result<std::unique_ptr<storage::Database>> db = OpenTrail(options.db_path, options.config_path, &path);
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", db.error().ToString().c_str());
    return kVerifyUnchecked;
  }
  storage::ChainVerifyOptions verify;
  verify.from_time_us = from_time_us;
  const auto find = [](const auto& map, const std::string& id) {
    const auto found = map.find(id);
    return found == map.end() ? std::nullopt : std::optional(found->second);
  };
  verify.checkpoint_public_key = [&](const std::string& id) { return find(keys.public_key, id); };
  verify.key_retired_at_us = [&](const std::string& id) -> std::optional<int64_t> {
    const std::optional<int64_t> retired_ms = find(keys.retired_ms, id);
    return retired_ms ? std::optional<int64_t>(*retired_ms * 1000) : std::nullopt;
  };
  if (keys.from_keyset) verify.legacy_hmac_key = [&](const std::string& id) { return find(keys.legacy_hmac_key, id); };
  Result<storage::ChainReport> report = storage::VerifyAuditChain(**db, verify);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.error().ToString().c_str());
    return kVerifyUnchecked;
  }
  const std::string scope = from_time_us > 0 ? "from " + FormatUtcTime(from_time_us, 6) : "from the first entry";
  if (report->problem) {
    const storage::ChainProblem& p = *report->problem;
    std::printf("audit trail BROKEN: %s at position %llu%s (seq %llu; key time %s, epoch %u, counter %llu): %s\n",
                storage::ChainProblemKindName(p.kind), static_cast<unsigned long long>(p.position),
                from_time_us > 0 ? " of this walk" : "", static_cast<unsigned long long>(p.seq),
                FormatUtcTime(p.key_time_us, 6).c_str(), p.epoch, static_cast<unsigned long long>(p.counter),
                p.detail.c_str());
    std::printf("  %llu entries before it verified, %s, in %s\n", static_cast<unsigned long long>(report->entries),
                scope.c_str(), path.c_str());
    return kVerifyBroken;
  }
  if (report->legacy > 0) {
    std::printf(
        "audit trail PARTLY VERIFIED: %llu records carry no chain fields (written before the chain, or "
        "stripped of them): nothing shows whether they were changed; %llu chained entries verified, %s, "
        "in %s\n",
        static_cast<unsigned long long>(report->legacy), static_cast<unsigned long long>(report->entries),
        scope.c_str(), path.c_str());
    std::printf("  to verify only what the chain covers: --from a time after the first chained start\n");
    return kVerifyPartly;
  }
  std::printf("audit trail intact: %llu entries verified (seq %llu to %llu), %s, in %s\n",
              static_cast<unsigned long long>(report->entries), static_cast<unsigned long long>(report->first_seq),
              static_cast<unsigned long long>(report->head_seq), scope.c_str(), path.c_str());
  std::printf("  checkpoint signatures verified: %llu\n", static_cast<unsigned long long>(report->checkpoints));
  if (report->after_last_checkpoint > 0) {
    std::printf("  entries after the last checkpoint (no signature covers them yet): %llu\n",
                static_cast<unsigned long long>(report->after_last_checkpoint));
  }
  if (report->entries > 0 && !report->ends_with_shutdown) {
    std::printf(
        "  the newest entry is not a shutdown checkpoint: the server is running or did not stop cleanly "
        "(or the trail's end was cut off: compare the head with the last checkpoint the server logged)\n");
  }
  if (report->entries > 0)
    std::printf("  head: seq %llu, hash %s\n", static_cast<unsigned long long>(report->head_seq),
                report->head_hash_hex.c_str());
  return kVerifyIntact;
}

int RunAudit(const AuditOptions& options) {
  std::string path;
  Result<std::unique_ptr<storage::Database>> db = OpenTrail(options.db_path, options.config_path, &path);
  if (!db.ok()) {
    std::fprintf(stderr, "%s\n", db.error().ToString().c_str());
    return 1;
  }
  storage::AuditLog log(db->get());
  if (options.actions) {
    Result<std::vector<storage::AuditAction>> actions = log.ReadLastActions(options.last);
    if (!actions.ok()) {
      std::fprintf(stderr, "%s\n", actions.error().ToString().c_str());
      return 1;
    }
    for (const storage::AuditAction& action : *actions) {
      std::printf("%s\n", storage::EncodeAuditAction(action).c_str());
    }
    if (actions->empty()) std::fprintf(stderr, "no operator actions yet in %s\n", path.c_str());
    return 0;
  }
  Result<std::vector<storage::AuditRecord>> records = log.ReadLast(options.last);
  if (!records.ok()) {
    std::fprintf(stderr, "%s\n", records.error().ToString().c_str());
    return 1;
  }
  for (const storage::AuditRecord& record : *records) std::printf("%s\n", storage::EncodeAuditRecord(record).c_str());
  if (records->empty()) std::fprintf(stderr, "no audit records yet in %s\n", path.c_str());
  return 0;
}

}  // namespace

void AddAuditCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<AuditOptions>();
  CLI::App* cmd = app.add_subcommand("audit", "Print recent decisions from the audit trail (newest first, JSON lines)");
  cmd->add_option("--last", options->last, "How many records (1 or more)")
      ->check(CLI::Range(static_cast<size_t>(1), static_cast<size_t>(1000000)))
      ->capture_default_str();
  cmd->add_option("--config", options->config_path, "Service settings file naming the database")->capture_default_str();
  cmd->add_option("--db", options->db_path, "Database directory (overrides --config)");
  cmd->add_flag("--actions", options->actions,
                "Operator actions instead of decisions: reloads, claims jobs submitted or cancelled, and who did them");
  auto verify_options = std::make_shared<VerifyOptions>();
  CLI::App* verify = cmd->add_subcommand(
      "verify",
      "Check the audit trail's hash chain and signed checkpoints; report the first entry broken, missing, reordered "
      "or altered (exit 0 intact, 1 broken, 2 could not check, 3 records outside the chain)");
  verify->add_option("--from", verify_options->from, "Start at this UTC time (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)");
  verify->add_option("--config", verify_options->config_path, "Service settings naming the database and keyset")
      ->capture_default_str();
  verify->add_option("--db", verify_options->db_path, "Database directory (overrides --config)");
  verify->add_option("--keyset", verify_options->keyset_path,
                     "Keyset whose keys signed the checkpoints (overrides --config)");
  verify->add_option("--public-keys", verify_options->public_keys_path,
                     "Verify with the public keys `txscore keys public` wrote, holding no secret (instead of the "
                     "keyset; a trail's HMAC checkpoints from before Ed25519 need the keyset)");
  verify->add_option("--kek-file", verify_options->kek_file, "Key-encryption key file of a wrapped --keyset");
  verify->add_option("--kek-env", verify_options->kek_env, "... or the environment variable holding it");
  verify->callback([verify_options, exit_code] { *exit_code = RunVerify(*verify_options); });
  cmd->callback([options, exit_code, verify] {
    if (!verify->parsed()) *exit_code = RunAudit(*options);
  });
}

}  // namespace txscore::service
