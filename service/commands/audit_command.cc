// txscore audit --last N [--actions]: recent decisions (or operator actions: reloads, claims
// jobs submitted or cancelled, with who did them), newest first, one JSON object per line.
#include <cstdio>

#include "service/commands/commands.h"
#include "service/settings.h"
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

int RunAudit(const AuditOptions& options) {
  std::string path = options.db_path;
  if (path.empty()) {
    Result<ServiceSettings> settings = LoadServiceSettings(options.config_path);
    if (!settings.ok()) {
      std::fprintf(stderr, "%s\n", settings.error().ToString().c_str());
      return 1;
    }
    path = settings->storage.path;
  }
  storage::DatabaseOptions db_options;
  db_options.read_only = true;  // may run beside a live server
  Result<std::unique_ptr<storage::Database>> db = storage::Database::Open(path, db_options);
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
  cmd->callback([options, exit_code] { *exit_code = RunAudit(*options); });
}

}  // namespace txscore::service
