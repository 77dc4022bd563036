// txscore keys create|import|rotate|retire|list|public: the keyset that tokenizes card numbers
// and claimant ids and signs the audit trail (fraud/keyset.h). A running server picks a changed
// keyset up at its next reload (SIGHUP or POST /admin/reload); secrets are never printed.
// `keys public` writes the audit trail's public keys, all an auditor needs to verify it.

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/core_dumps.h"
#include "common/durable_file.h"
#include "common/utc_time.h"
#include "fraud/keyset.h"
#include "service/commands/commands.h"
#include "service/settings.h"

namespace txscore::service {
namespace {

struct KeysOptions {
  std::string action;
  std::string config_path = "config/txscore.yaml";
  std::string keyset_path;  // overrides the settings' security.keyset
  std::string kek_file, kek_env;
  std::string card_key;  // import: a raw key file
  std::string id;        // retire
  std::string out;       // public: the public-key file
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The keyset file and KEK: from the flags, else from the settings file.
Result<std::pair<std::string, fraud::KekSource>> Target(const KeysOptions& options) {
  fraud::KekSource kek{options.kek_file, options.kek_env};
  if (!options.keyset_path.empty()) return std::pair{options.keyset_path, kek};
  TXSCORE_ASSIGN_OR_RETURN(ServiceSettings settings, LoadServiceSettings(options.config_path));
  if (settings.security.keyset.empty()) {
    return FailedPrecondition(options.config_path +
                              " names no keyset (security.keyset): it uses a raw card_key_file, which cannot "
                              "rotate. Make a keyset from it with: txscore keys import --card-key " +
                              settings.security.card_key_file + " --out KEYSET, then name KEYSET in security.keyset");
  }
  if (kek.empty()) kek = settings.security.kek();
  return std::pair{settings.security.keyset, kek};
}

void PrintKeys(const fraud::Keyset& keyset) {
  for (const fraud::KeysetKey& key : keyset.keys()) {
    std::string line = key.id + " " + fraud::KeyStateName(key.state);
    if (key.created_ms != 0) line += " created " + FormatUtcTime(key.created_ms * 1000);
    if (key.retired_ms != 0) line += " retired " + FormatUtcTime(key.retired_ms * 1000);
    // Whether the key gives each purpose its own key (keys made since) or is its own card key.
    line += key.per_purpose ? " keys: hkdf-sha256 per purpose" : " keys: the secret itself (from before)";
    std::printf("%s\n", line.c_str());
  }
}

Status Run(const KeysOptions& options) {
  TXSCORE_RETURN_IF_ERROR(KeepSecretsOutOfCoreDumps(false));  // it holds the keys in clear
  const fraud::KekSource kek{options.kek_file, options.kek_env};
  if (options.action == "create" || options.action == "import") {
    if (options.keyset_path.empty()) return InvalidArgument("--out FILE is required");
    if (std::filesystem::exists(options.keyset_path)) {
      return FailedPrecondition(options.keyset_path +
                                " exists: a keyset is never overwritten (rotate it with txscore keys rotate)");
    }
    fraud::Keyset keyset = fraud::Keyset::Generate(NowMs());
    if (options.action == "import") {
      // The raw key keeps tokenizing (its tokens are bare hex, as before) until a rotation.
      TXSCORE_ASSIGN_OR_RETURN(keyset, fraud::LoadKeyset(options.card_key));
      if (keyset.primary().id != fraud::kLegacyKeyId) {
        return InvalidArgument(options.card_key + " is already a keyset");
      }
    }
    TXSCORE_RETURN_IF_ERROR(fraud::SaveKeyset(keyset, options.keyset_path, kek));
    std::printf("wrote %s%s\n", options.keyset_path.c_str(), kek.empty() ? "" : " (wrapped with AES-256-GCM)");
    PrintKeys(keyset);
    return Status::Ok();
  }
  TXSCORE_ASSIGN_OR_RETURN(auto target, Target(options));
  const auto& [path, source] = target;
  // These commands change or list a keyset: a raw key file is refused (keys import makes a keyset of it).
  TXSCORE_ASSIGN_OR_RETURN(fraud::Keyset keyset, fraud::LoadKeyset(path, source, fraud::KeyFileForm::kKeysetOnly));
  if (options.action == "public") {
    std::error_code ignored;
    if (std::filesystem::symlink_status(options.out, ignored).type() != std::filesystem::file_type::not_found) {
      return FailedPrecondition(options.out + " exists: remove it first, or name another file");
    }
    TXSCORE_ASSIGN_OR_RETURN(std::string text, fraud::SerializeAuditPublicKeys(keyset));
    // Anyone may read a public key; only its owner may change it (LoadAuditPublicKeys checks).
    TXSCORE_RETURN_IF_ERROR(WriteNewFileDurably(options.out, text, 0644));
    std::printf(
        "wrote %s: the audit trail's public keys (no secret); verify with: txscore audit verify "
        "--public-keys %s\n",
        options.out.c_str(), options.out.c_str());
    PrintKeys(keyset);
    return Status::Ok();
  }
  if (options.action == "rotate") {
    keyset = keyset.Rotated(NowMs());
  } else if (options.action == "retire") {
    TXSCORE_ASSIGN_OR_RETURN(keyset, keyset.WithRetired(options.id, NowMs()));
  }
  if (options.action != "list") {
    TXSCORE_RETURN_IF_ERROR(fraud::SaveKeyset(keyset, path, source));
    std::printf("wrote %s; a running server uses it from its next reload (SIGHUP or POST /admin/reload)\n",
                path.c_str());
  }
  PrintKeys(keyset);
  return Status::Ok();
}

}  // namespace

void AddKeysCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<KeysOptions>();
  CLI::App* keys = app.add_subcommand("keys",
                                      "The keyset that tokenizes card numbers and claimant ids and signs the audit "
                                      "trail: create, rotate, retire, public");
  keys->require_subcommand(1);
  const auto common = [options](CLI::App* cmd, bool from_settings) {
    if (from_settings) {
      cmd->add_option("--config", options->config_path, "Service settings naming the keyset (security.keyset)")
          ->capture_default_str();
      cmd->add_option("--keyset", options->keyset_path, "The keyset file (overrides --config)");
    }
    cmd->add_option("--kek-file", options->kek_file, "Wrap (or unwrap) with the key-encryption key in this file");
    cmd->add_option("--kek-env", options->kek_env, "... or in this environment variable (64 hex digits)");
  };
  CLI::App* create = keys->add_subcommand("create", "A new keyset with one primary key");
  create->add_option("--out", options->keyset_path, "The keyset file to write (mode 0600)")->required();
  common(create, false);
  CLI::App* import =
      keys->add_subcommand("import", "A keyset whose primary key is a raw card key file's (history kept)");
  import->add_option("--card-key", options->card_key, "The raw key file (security.card_key_file)")->required();
  import->add_option("--out", options->keyset_path, "The keyset file to write (mode 0600)")->required();
  common(import, false);
  CLI::App* rotate = keys->add_subcommand("rotate", "A new primary key; the old primary stays active for lookups");
  common(rotate, true);
  CLI::App* retire = keys->add_subcommand("retire", "Retire a key: its tokens are no longer resolved");
  retire->add_option("--id", options->id, "The key to retire")->required();
  common(retire, true);
  CLI::App* list = keys->add_subcommand("list", "Key ids, states, creation and retirement times (never the secrets)");
  common(list, true);
  CLI::App* public_keys = keys->add_subcommand(
      "public", "Write the audit trail's public keys (no secret): what `txscore audit verify --public-keys` needs");
  public_keys->add_option("--out", options->out, "The public-key file to write (mode 0644; never overwritten)")
      ->required();
  common(public_keys, true);
  for (CLI::App* cmd : {create, import, rotate, retire, list, public_keys}) {
    cmd->callback([options, exit_code, cmd] {
      options->action = cmd->get_name();
      const Status done = Run(*options);
      if (!done.ok()) std::fprintf(stderr, "%s\n", done.error().ToString().c_str());
      *exit_code = done.ok() ? 0 : 1;
    });
  }
}

}  // namespace txscore::service
