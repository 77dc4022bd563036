// The `txscore` subcommands. Each Add*Command registers itself on the CLI app; when it runs,
// it stores the process exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

#include "common/logging.h"

namespace txscore::service {

// --log-level and --log-format on `cmd`, into *options (whose format is the command's default).
void AddLoggingOptions(CLI::App* cmd, LoggingOptions* options);

void AddServeCommand(CLI::App& app, int* exit_code);
void AddTrainCommand(CLI::App& app, int* exit_code);
void AddScoreCommand(CLI::App& app, int* exit_code);
void AddAuditCommand(CLI::App& app, int* exit_code);
void AddModelCommand(CLI::App& app, int* exit_code);
void AddDataCommand(CLI::App& app, int* exit_code);
void AddLlmCommand(CLI::App& app, int* exit_code);
void AddGenerateCommand(CLI::App& app, int* exit_code);
void AddPlanCommand(CLI::App& app, int* exit_code);
void AddConformanceCommand(CLI::App& app, int* exit_code);
void AddBatchCommand(CLI::App& app, int* exit_code);
void AddJobCommand(CLI::App& app, int* exit_code);
void AddKeysCommand(CLI::App& app, int* exit_code);
void AddShardCommand(CLI::App& app, int* exit_code);
void AddPipelineCommand(CLI::App& app, int* exit_code);

}  // namespace txscore::service
