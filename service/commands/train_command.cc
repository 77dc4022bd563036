// txscore train: generate transactions, train the fraud model, write model + schema + metrics.
#include <cstdio>

#include "fraud/trainer.h"
#include "service/commands/commands.h"
#include "service/commands/progress.h"

namespace txscore::service {

void AddTrainCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<fraud::TrainOptions>();
  options->out_dir = "var/models";
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a fraud model (XGBoost, hist) on generated transactions, or on generated claims (--kind claims)");
  cmd->add_option("--kind", options->kind, "transactions (the card fraud model) or claims (the claims model)")
      ->check(CLI::IsMember({"transactions", "claims"}))
      ->capture_default_str();
  cmd->add_option("--claims", options->claims_data.claims, "Claims to generate (--kind claims)")
      ->check(CLI::Range(100, 10000000))
      ->capture_default_str();
  cmd->add_option("--out", options->out_dir, "Directory for <name>.ubj, <name>.features.json, <name>.metrics.json")
      ->capture_default_str();
  cmd->add_option("--format", options->format, "ubj or json")
      ->check(CLI::IsMember({"ubj", "json"}))
      ->capture_default_str();
  cmd->add_option("--seed", options->data.seed, "Generator seed")->capture_default_str();
  cmd->add_option("--name", options->model_name, "Model name (file stem; default fraud, or claims with --kind claims)");
  cmd->add_option("--cards", options->data.cards, "Cards to simulate")
      ->check(CLI::Range(10, 10000000))
      ->capture_default_str();
  cmd->add_option("--days", options->data.days, "Days of activity")->check(CLI::Range(2, 3650))->capture_default_str();
  cmd->add_option("--rounds", options->rounds, "Boosting rounds")->check(CLI::Range(1, 10000))->capture_default_str();
  cmd->add_option("--max-depth", options->max_depth, "Tree depth")->check(CLI::Range(1, 16))->capture_default_str();
  cmd->add_option("--threads", options->nthread, "Training threads (0 = all cores)")->capture_default_str();
  cmd->callback([options, exit_code, cmd] {
    ProgressDisplay progress("training");
    if (options->kind == "claims") {
      options->claims_data.seed = options->data.seed;
      if (cmd->count("--name") == 0) options->model_name = "claims";
      std::fprintf(stderr, "generating %d claims (seed %llu) and computing features...\n", options->claims_data.claims,
                   static_cast<unsigned long long>(options->claims_data.seed));
    } else {
      std::fprintf(stderr, "generating %d cards x %d days (seed %llu) and computing features...\n", options->data.cards,
                   options->data.days, static_cast<unsigned long long>(options->data.seed));
    }
    Result<fraud::TrainReport> report =
        fraud::TrainFraudModel(*options, [&](int round, int rounds) { progress.Update(round, rounds); });
    if (!report.ok()) {
      std::fprintf(stderr, "training failed: %s\n", report.error().ToString().c_str());
      *exit_code = 1;
      return;
    }
    std::printf("model    %s\nschema   %s\nmetrics  %s\n", report->model_path.c_str(), report->schema_path.c_str(),
                report->metrics_path.c_str());
    std::printf("held-out ROC-AUC %.4f  PR-AUC %.4f  (train %zu rows, %.2f%% fraud; test %zu rows, %.2f%% fraud)\n",
                report->roc_auc, report->pr_auc, report->train_rows, 100 * report->train_fraud_rate, report->test_rows,
                100 * report->test_fraud_rate);
  });
}

}  // namespace txscore::service
