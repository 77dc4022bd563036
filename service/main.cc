// txscore: transaction- and claims-scoring service. See README.md.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "common/malloc_tuning.h"
#include "service/build_info.h"
#include "service/commands/commands.h"

namespace {

// Edits between two words, a swap of neighbours counting as one (optimal string alignment):
// "scroe" is one edit from "score", two from "serve".
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// An error naming an unknown first word and the nearest command, or "" when it is known.
std::string UnknownCommandMessage(CLI::App& app, const std::string& word) {
  std::string nearest;
  size_t best = SIZE_MAX;
  for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    if (command->get_name() == word) return "";
    const size_t distance = EditDistance(word, command->get_name());
    if (distance < best) {
      best = distance;
      nearest = command->get_name();
    }
  }
  std::string message = "txscore: unknown command \"" + word + "\"";
  if (best <= 2) message += "; did you mean \"" + nearest + "\"?";
  return message + " (txscore --help lists the commands)";
}

}  // namespace

int main(int argc, char** argv) {
  txscore::KeepFreedHeapMemory();
  // What txscore writes holds card tokens, claimant data, the audit trail or keys: its files are
  // its owner's alone (0600, directories 0700), RocksDB's included, whatever umask it inherited.
  ::umask(077);
  CLI::App app{"txscore: fraud scoring over Thrift, with an audit trail in RocksDB"};
  app.require_subcommand(1);
  const txscore::service::BuildInfo& build = txscore::service::ThisBuild();
  app.set_version_flag(
      "--version", "txscore " + build.version + " (commit " + build.commit + ", built with " + build.compiler + ")");
  int exit_code = 0;
  txscore::service::AddServeCommand(app, &exit_code);
  txscore::service::AddTrainCommand(app, &exit_code);
  txscore::service::AddScoreCommand(app, &exit_code);
  txscore::service::AddAuditCommand(app, &exit_code);
  txscore::service::AddModelCommand(app, &exit_code);
  txscore::service::AddDataCommand(app, &exit_code);
  txscore::service::AddLlmCommand(app, &exit_code);
  txscore::service::AddGenerateCommand(app, &exit_code);
  txscore::service::AddPlanCommand(app, &exit_code);
  txscore::service::AddPipelineCommand(app, &exit_code);
  txscore::service::AddConformanceCommand(app, &exit_code);
  txscore::service::AddBatchCommand(app, &exit_code);
  txscore::service::AddJobCommand(app, &exit_code);
  txscore::service::AddKeysCommand(app, &exit_code);
  txscore::service::AddShardCommand(app, &exit_code);
  if (argc > 1 && argv[1][0] != '-') {
    const std::string unknown = UnknownCommandMessage(app, argv[1]);
    if (!unknown.empty()) {
      std::cerr << unknown << "\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help) and gives each kind of mistake its own code; every
    // usage error exits 2, as the unknown-command check above does and as shell tools do.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // A command let an exception escape: say so plainly instead of abort()ing with a core.
    std::cerr << "txscore: internal error: " << e.what()
              << "\nThis is a bug in txscore; please report it with the command you ran.\n";
    return 70;  // EX_SOFTWARE
  }
  return exit_code;
}
