// txscore data generate: synthetic transactions as a feature CSV (for data scientists) or as
// JSON lines (for `txscore score --file`).
#include <cmath>
#include <cstdio>
#include <fstream>

#include "fraud/synthetic.h"
#include "fraud/trainer.h"
#include "service/commands/commands.h"
#include "service/transaction_json.h"

namespace txscore::service {
namespace {

struct GenerateOptions {
  fraud::SyntheticOptions data;
  std::string out_path;
  std::string format = "csv";
};

int RunGenerate(const GenerateOptions& options) {
  const std::vector<fraud::LabeledTransaction> transactions = fraud::GenerateTransactions(options.data);
  const std::string tmp_path = options.out_path + ".tmp";
  std::ofstream out(tmp_path, std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", options.out_path.c_str());
    return 1;
  }
  size_t fraud_count = 0;
  if (options.format == "csv") {
    Result<fraud::FeatureTable> table = fraud::BuildFeatureTable(transactions);
    if (!table.ok()) {
      std::fprintf(stderr, "%s\n", table.error().ToString().c_str());
      return 1;
    }
    const size_t cols = table->schema.size();
    for (size_t c = 0; c < cols; ++c) out << fraud::FeatureName(table->schema.at(c)) << ",";
    out << "label\n";
    char buf[32];
    for (size_t r = 0; r < table->rows(); ++r) {
      for (size_t c = 0; c < cols; ++c) {
        const float v = table->values[r * cols + c];
        if (!std::isnan(v)) {
          std::snprintf(buf, sizeof buf, "%.9g", v);
          out << buf;
        }
        out << ",";
      }
      out << (table->labels[r] > 0.5f ? "1" : "0") << "\n";
      fraud_count += table->labels[r] > 0.5f;
    }
  } else {
    for (const fraud::LabeledTransaction& t : transactions) {
      out << TransactionToJson(ToThriftTransaction(t.tx)) << "\n";
      fraud_count += t.is_fraud;
    }
  }
  out.close();
  if (!out || std::rename(tmp_path.c_str(), options.out_path.c_str()) != 0) {
    std::fprintf(stderr, "cannot write %s\n", options.out_path.c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %zu transactions (%zu fraud, %.2f%%) to %s\n", transactions.size(), fraud_count,
               100.0 * static_cast<double>(fraud_count) / static_cast<double>(transactions.size()),
               options.out_path.c_str());
  return 0;
}

}  // namespace

void AddDataCommand(CLI::App& app, int* exit_code) {
  CLI::App* data = app.add_subcommand("data", "Synthetic data");
  data->require_subcommand(1);
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* generate = data->add_subcommand("generate", "Write synthetic transactions with fraud labels");
  generate->add_option("--out", options->out_path, "Output file")->required();
  generate->add_option("--format", options->format, "csv (features + label) or jsonl (transactions)")
      ->check(CLI::IsMember({"csv", "jsonl"}))
      ->capture_default_str();
  generate->add_option("--seed", options->data.seed, "Generator seed")->capture_default_str();
  generate->add_option("--cards", options->data.cards, "Cards to simulate")->capture_default_str();
  generate->add_option("--days", options->data.days, "Days of activity")->capture_default_str();
  generate->callback([options, exit_code] { *exit_code = RunGenerate(*options); });
}

}  // namespace txscore::service
