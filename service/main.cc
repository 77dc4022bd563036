// txscore: transaction- and claims-scoring service. See README.md.
#include <CLI/CLI.hpp>

#include "common/malloc_tuning.h"
#include "service/commands/commands.h"

int main(int argc, char** argv) {
  txscore::KeepFreedHeapMemory();
  CLI::App app{"txscore: fraud scoring over Thrift, with an audit trail in RocksDB"};
  app.require_subcommand(1);
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
  txscore::service::AddConformanceCommand(app, &exit_code);
  txscore::service::AddBatchCommand(app, &exit_code);
  txscore::service::AddJobCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
