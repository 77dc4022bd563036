// Trains the fraud model through XGBoost's C API on generated transactions.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/claims_synthetic.h"
#include "fraud/feature_schema.h"
#include "fraud/synthetic.h"

namespace txscore::fraud {

// Rows of features (schema order) with 0/1 labels.
struct FeatureTable {
  FeatureSchema schema = FeatureSchema::TransactionFeatures();
  std::vector<float> values;  // rows * schema.size(), row-major
  std::vector<float> labels;
  size_t rows() const { return labels.size(); }
};

// Replays the transactions in order through the same feature code the service uses, keeping
// card state in memory (keyed by PAN: nothing here is stored).
Result<FeatureTable> BuildFeatureTable(const std::vector<LabeledTransaction>& transactions);

// Claims in the claim feature schema. The provider feature is computed as a claims job does
// (fraud/provider_history.h): the provider's claims, among `claims`, reported in the days
// before each claim's own.
Result<FeatureTable> BuildClaimFeatureTable(const std::vector<LabeledClaim>& claims);

struct TrainOptions {
  std::string kind = "transactions";   // Default: the transaction fraud model; or "claims"
  SyntheticOptions data;               // what to generate (transactions)
  SyntheticClaimsOptions claims_data;  // what to generate (claims)
  int rounds = 200;                    // Default: 200 boosting rounds
  int max_depth = 6;                   // Default: 6
  double learning_rate = 0.1;          // Default: 0.1
  int nthread = 0;                     // Default: 0 = all cores
  double test_fraction = 0.2;          // Default: the newest 20 % of transactions are held out
  std::string out_dir;                 // required
  std::string model_name = "fraud";    // Default: writes fraud.ubj, fraud.features.json, fraud.metrics.json
  std::string format = "ubj";          // Default: "ubj" (UBJSON); or "json"
};

struct TrainReport {
  double roc_auc = 0;
  double pr_auc = 0;  // average precision
  size_t train_rows = 0;
  size_t test_rows = 0;
  double train_fraud_rate = 0;
  double test_fraud_rate = 0;
  std::string model_path;
  std::string schema_path;
  std::string metrics_path;
};

// `progress(round, rounds)` is called after each boosting round when given.
Result<TrainReport> TrainFraudModel(const TrainOptions& options,
                                    const std::function<void(int, int)>& progress = nullptr);

// Area under the ROC curve (ties count half) and average precision, for 0/1 labels.
double RocAuc(const std::vector<float>& scores, const std::vector<float>& labels);
double AveragePrecision(const std::vector<float>& scores, const std::vector<float>& labels);

}  // namespace txscore::fraud
