// txscore data generate: synthetic transactions as a feature CSV (for data scientists) or as
// JSON lines (for `txscore score --file`); with --kind claims, synthetic claims as JSON lines
// or CSV (for `txscore batch run`).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fraud/claims_synthetic.h"
#include "fraud/synthetic.h"
#include "fraud/trainer.h"
#include "service/commands/commands.h"
#include "service/transaction_json.h"

namespace txscore::service {
namespace {

struct GenerateOptions {
  std::string kind = "transactions";
  fraud::SyntheticOptions data;
  fraud::SyntheticClaimsOptions claims;
  std::string out_path;
  std::string format;       // csv or jsonl; empty: from the output file's extension
  std::string labels_path;  // claims: the labels and patterns, as JSON lines, for evaluation
};

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char ch : text) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return quoted + "\"";
}

// Claims as JSON lines or CSV (the columns ParseClaimJson reads), written to a temporary name
// and renamed, so a reader never sees half a file.
int RunGenerateClaims(const GenerateOptions& options) {
  const std::vector<fraud::LabeledClaim> claims = fraud::GenerateClaims(options.claims);
  const std::string tmp_path = options.out_path + ".tmp";
  std::ofstream out(tmp_path, std::ios::trunc);
  std::ofstream labels;
  if (!options.labels_path.empty()) labels.open(options.labels_path, std::ios::trunc);
  if (!out || (!options.labels_path.empty() && !labels)) {
    std::fprintf(stderr, "cannot write %s\n", options.out_path.c_str());
    return 1;
  }
  if (options.format == "csv") {
    out << "claim_id,policy_id,claimant_id,incident_date,report_date,claim_type,amount_claimed,policy_limit,"
           "prior_claims,provider_id,narrative,adjuster_notes\n";
  }
  size_t fraud_count = 0;
  char amount[64], limit[64];
  for (const fraud::LabeledClaim& labeled : claims) {
    const fraud::RawClaim& c = labeled.claim;
    if (options.format == "csv") {
      std::snprintf(amount, sizeof amount, "%.2f", c.amount_claimed);
      std::snprintf(limit, sizeof limit, "%.2f", c.policy_limit);
      out << CsvField(c.claim_id) << "," << CsvField(c.policy_id) << "," << CsvField(c.claimant_id) << ","
          << c.incident_date << "," << c.report_date << "," << c.claim_type << "," << amount << "," << limit << ","
          << c.prior_claims << "," << CsvField(c.provider_id) << "," << CsvField(c.narrative) << ","
          << CsvField(c.adjuster_notes) << "\n";
    } else {
      out << fraud::ClaimToJson(c) << "\n";
    }
    if (labels.is_open()) {
      std::string patterns;
      for (const std::string& p : labeled.patterns) patterns += (patterns.empty() ? "\"" : ",\"") + p + "\"";
      labels << "{\"claim_id\":\"" << c.claim_id << "\",\"fraud\":" << (labeled.is_fraud ? "true" : "false")
             << ",\"patterns\":[" << patterns << "]}\n";
    }
    fraud_count += labeled.is_fraud;
  }
  out.close();
  if (!out || std::rename(tmp_path.c_str(), options.out_path.c_str()) != 0) {
    std::fprintf(stderr, "cannot write %s\n", options.out_path.c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %zu claims (%zu fraud, %.2f%%) to %s\n", claims.size(), fraud_count,
               claims.empty() ? 0.0 : 100.0 * static_cast<double>(fraud_count) / static_cast<double>(claims.size()),
               options.out_path.c_str());
  return 0;
}

// The format the output file's extension names ("" when it names none).
std::string FormatOfExtension(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".csv") return "csv";
  if (extension == ".jsonl" || extension == ".ndjson" || extension == ".json") return "jsonl";
  return "";
}

// Settles --format against the file name, so `batch run` (which reads .csv as CSV and
// anything else as JSON lines) reads back what was written; an error message when they clash.
std::string ResolveFormat(GenerateOptions* options) {
  const std::string implied = FormatOfExtension(options->out_path);
  if (options->format.empty()) {
    if (implied.empty()) {
      return "cannot tell the format from the name " + options->out_path +
             "; end it in .csv or .jsonl, or pass --format csv|jsonl";
    }
    options->format = implied;
  } else if (!implied.empty() && implied != options->format) {
    return "--format " + options->format + " does not match the file name " + options->out_path + " (which says " +
           implied + "); change one of them";
  }
  return "";
}

int RunGenerate(GenerateOptions options) {
  if (const std::string clash = ResolveFormat(&options); !clash.empty()) {
    std::fprintf(stderr, "%s\n", clash.c_str());
    return 2;
  }
  if (options.kind == "claims") return RunGenerateClaims(options);
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
  CLI::App* generate = data->add_subcommand("generate", "Write synthetic transactions or claims with fraud labels");
  generate->add_option("--kind", options->kind, "transactions or claims")
      ->check(CLI::IsMember({"transactions", "claims"}))
      ->capture_default_str();
  generate->add_option("--out", options->out_path, "Output file")->required();
  generate
      ->add_option("--format", options->format,
                   "transactions: csv (features + label) or jsonl; claims: jsonl or csv (the claims "
                   "themselves). Default: from --out's extension (.csv, or .jsonl/.ndjson/.json)")
      ->check(CLI::IsMember({"csv", "jsonl"}));
  generate->add_option("--seed", options->data.seed, "Generator seed")->capture_default_str();
  generate->add_option("--claims", options->claims.claims, "Claims to generate (--kind claims)")->capture_default_str();
  generate->add_option("--labels", options->labels_path,
                       "Claims: also write labels and fraud patterns (JSON lines) here");
  generate->add_option("--cards", options->data.cards, "Cards to simulate")->capture_default_str();
  generate
      ->add_option("--days", options->data.days,
                   "Days of activity. Claims: days their incidents span (default: about 11 claims a day, so "
                   "4000 claims cover a year)")
      ->capture_default_str();
  generate->callback([options, exit_code, generate] {
    options->claims.seed = options->data.seed;
    if (generate->count("--days") > 0) options->claims.days = options->data.days;
    *exit_code = RunGenerate(*options);
  });
}

}  // namespace txscore::service
