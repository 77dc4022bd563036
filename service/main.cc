// txscore: transaction- and claims-scoring service. See README.md.
#include <sys/stat.h>
#include <thrift/Thrift.h>  // GlobalOutput

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/pan_scan.h"
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

// The name among `names` nearest to `word`, when it is at most two edits away; "" otherwise.
std::string NearestWithinTwoEdits(const std::string& word, const std::vector<std::string>& names) {
  std::string nearest;
  size_t best = 3;
  for (const std::string& name : names) {
    const size_t distance = EditDistance(word, name);
    if (distance < best) {
      best = distance;
      nearest = name;
    }
  }
  return nearest;
}

// An error naming the first word that is not a command where one is expected (after
// "txscore", or after a command that has commands of its own, such as "job"), with the nearest
// command; "" when the words name known commands. After an option where a command is expected
// ("job --server X sumbit": the option belongs after the command), any later word may be its
// value, so only a word near a command's name is taken for a mistyped command, and only when no
// later word names one; otherwise CLI11 reports the mistake.
std::string UnknownCommandMessage(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path = "txscore";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty()) return "";
    std::vector<std::string> names;
    CLI::App* next = nullptr;
    for (CLI::App* command : at->get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(command->get_name());
      if (command->get_name() == word) next = command;
    }
    if (names.empty()) return "";  // a command without commands: the rest are its arguments
    const auto unknown = [&](const std::string& mistyped, const std::string& nearest) {
      std::string message = path + ": unknown command \"" + mistyped + "\"";
      if (!nearest.empty()) message += "; did you mean \"" + nearest + "\"?";
      return message + " (" + path + " --help lists the commands)";
    };
    if (word[0] == '-') {
      for (int later = i + 1; later < argc; ++later) {
        if (std::find(names.begin(), names.end(), argv[later]) != names.end()) return "";
      }
      for (int later = i + 1; later < argc; ++later) {
        if (argv[later][0] == '-') continue;
        if (const std::string nearest = NearestWithinTwoEdits(argv[later], names); !nearest.empty()) {
          return unknown(argv[later], nearest);
        }
      }
      return "";
    }
    if (next == nullptr) return unknown(word, NearestWithinTwoEdits(word, names));
    at = next;
    path += " " + word;
  }
  return "";
}

// After a failed parse: for each --option the command that was being parsed does not know,
// the nearest one it does ("--sever": "--server"), as lines to print; "" when none is near.
std::string UnknownOptionHints(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  std::vector<std::string> known;
  for (const CLI::Option* option : at->get_options()) {
    for (const std::string& name : option->get_lnames()) known.push_back("--" + name);
  }
  std::string hints;
  for (int i = 1; i < argc; ++i) {
    const std::string word = std::string(argv[i]).substr(0, std::string(argv[i]).find('='));
    if (word.size() < 3 || word.compare(0, 2, "--") != 0) continue;
    if (std::find(known.begin(), known.end(), word) != known.end()) continue;
    if (const std::string nearest = NearestWithinTwoEdits(word, known); !nearest.empty()) {
      hints += "txscore: unknown option " + word + "; did you mean " + nearest + "?\n";
    }
  }
  return hints;
}

}  // namespace

int main(int argc, char** argv) {
  txscore::KeepFreedHeapMemory();
  // What txscore writes holds card tokens, claimant data, the audit trail or keys: its files are
  // its owner's alone (0600, directories 0700), RocksDB's included, whatever umask it inherited.
  ::umask(077);
  // Every line through the one redacting sink from the start, spdlog's default logger included;
  // serve and batch set their own level and format later.
  txscore::ConfigureLogging({});
  // Thrift's library prints its own lines on stderr ("TSocket::open() connect() ...") before a
  // command prints what failed and what to do: logged at debug level instead, which client
  // commands do not show. `serve` sends them to its log as warnings (service/rpc_server.cc).
  apache::thrift::GlobalOutput.setOutputFunction(
      [](const char* message) { txscore::Log("thrift").debug("{}", message); });
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
  if (const std::string unknown = UnknownCommandMessage(app, argc, argv); !unknown.empty()) {
    std::cerr << unknown << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help) and gives each kind of mistake its own code; every
    // usage error exits 2, as the unknown-command check above does and as shell tools do.
    const int code = app.exit(e);
    if (code == 0) return 0;
    std::cerr << UnknownOptionHints(app, argc, argv);
    return 2;
  } catch (const std::exception& e) {
    // A command let an exception escape: say so plainly instead of abort()ing with a core.
    std::cerr << "txscore: internal error: " << txscore::RedactPans(e.what())
              << "\nThis is a bug in txscore; please report it with the command you ran.\n";
    return 70;  // EX_SOFTWARE
  }
  return exit_code;
}
