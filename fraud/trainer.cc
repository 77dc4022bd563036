#include "fraud/trainer.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "fraud/entity_state.h"
#include "fraud/features.h"
#include "fraud/provider_history.h"
#include "fraud/xgboost_model.h"

namespace txscore::fraud {
namespace {

// Owns an XGBoost handle and frees it on every return path.
template <typename Handle, int (*Free)(Handle)>
class XGBoostHandle {
 public:
  XGBoostHandle() = default;
  ~XGBoostHandle() {
    if (handle_ != nullptr) Free(handle_);
  }
  Handle* out() { return &handle_; }
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};
using DMatrix = XGBoostHandle<DMatrixHandle, XGDMatrixFree>;
using Booster = XGBoostHandle<BoosterHandle, XGBoosterFree>;

Error XGBoostFailure(const std::string& what) { return Internal(what + ": " + LastXGBoostError()); }

Status MakeDMatrix(const FeatureTable& table, size_t begin, size_t end, DMatrix* out) {
  const size_t cols = table.schema.size();
  if (XGDMatrixCreateFromMat(table.values.data() + begin * cols, end - begin, cols,
                             std::numeric_limits<float>::quiet_NaN(), out->out()) != 0) {
    return XGBoostFailure("XGDMatrixCreateFromMat");
  }
  if (XGDMatrixSetFloatInfo(out->get(), "label", table.labels.data() + begin, end - begin) != 0) {
    return XGBoostFailure("XGDMatrixSetFloatInfo(label)");
  }
  return Status::Ok();
}

double Mean(const std::vector<float>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return end > begin ? sum / static_cast<double>(end - begin) : 0;
}

void AppendRow(const FeatureSchema& schema, const FeatureVector& features, std::vector<float>* values) {
  const size_t at = values->size();
  values->resize(at + schema.size());
  schema.Select(features, values->data() + at);
}

}  // namespace

Result<FeatureTable> BuildFeatureTable(const std::vector<LabeledTransaction>& transactions) {
  FeatureTable table;
  table.values.reserve(transactions.size() * table.schema.size());
  table.labels.reserve(transactions.size());
  std::unordered_map<std::string, CardState> cards;
  for (const LabeledTransaction& labeled : transactions) {
    Result<Transaction> tx = ValidateTransaction(labeled.tx);
    if (!tx.ok())
      return InvalidArgument("generated transaction " + labeled.tx.request_id + ": " + tx.error().ToString());
    CardState& state = cards[labeled.tx.card_number.value_or("")];
    const FeatureVector features = ComputeFeatures(*tx, state);
    UpdateCardState(*tx, &state);
    AppendRow(table.schema, features, &table.values);
    table.labels.push_back(labeled.is_fraud ? 1.0f : 0.0f);
  }
  return table;
}

Result<FeatureTable> BuildClaimFeatureTable(const std::vector<LabeledClaim>& claims) {
  FeatureTable table;
  table.schema = FeatureSchema::ClaimFeatures();
  table.values.reserve(claims.size() * table.schema.size());
  table.labels.reserve(claims.size());
  // Features do not read the claimant token; any key will do.
  const std::unique_ptr<CardTokenizer> tokenizer =
      CardTokenizer::FromKey(std::string(CardTokenizer::kMinKeyBytes, 't'));
  std::vector<Claim> validated;
  validated.reserve(claims.size());
  for (const LabeledClaim& labeled : claims) {
    Result<Claim> claim = ValidateClaim(labeled.claim, *tokenizer);
    if (!claim.ok())
      return InvalidArgument("generated claim " + labeled.claim.claim_id + ": " + claim.error().ToString());
    validated.push_back(std::move(claim).value());
  }
  // The provider feature as a claims job computes it (pipelines/claims_job.cc): each claim
  // counts the provider's claims of the days before its own, among all the claims.
  std::map<std::string, ProviderClaimsHistory> providers;
  for (const Claim& claim : validated) {
    providers[claim.provider_id].Add(ProviderClaimsHistory::ClaimDigest(claim.claim_id), claim.report_day);
  }
  for (size_t i = 0; i < validated.size(); ++i) {
    const Claim& claim = validated[i];
    AppendRow(table.schema, ComputeClaimFeatures(claim, providers.at(claim.provider_id).CountBefore(claim.report_day)),
              &table.values);
    table.labels.push_back(claims[i].is_fraud ? 1.0f : 0.0f);
  }
  return table;
}

double RocAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U with average ranks for ties.
  double positive_rank_sum = 0;
  size_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        positive_rank_sum += average_rank;
        ++positives;
      }
    }
    i = j;
  }
  const size_t negatives = scores.size() - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2.0) / (p * static_cast<double>(negatives));
}

double AveragePrecision(const std::vector<float>& scores, const std::vector<float>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  const double total_positives = std::count_if(labels.begin(), labels.end(), [](float l) { return l > 0.5f; });
  if (total_positives == 0) return std::numeric_limits<double>::quiet_NaN();
  // Sum over distinct thresholds of (recall step) * precision, as scikit-learn does.
  double ap = 0, true_positives = 0, previous_recall = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) {
      if (labels[order[j]] > 0.5f) true_positives += 1;
      ++j;
    }
    const double recall = true_positives / total_positives;
    const double precision = true_positives / static_cast<double>(j);
    ap += (recall - previous_recall) * precision;
    previous_recall = recall;
    i = j;
  }
  return ap;
}

Result<TrainReport> TrainFraudModel(const TrainOptions& options, const std::function<void(int, int)>& progress) {
  if (options.out_dir.empty()) return InvalidArgument("an output directory is required", "out_dir");
  if (options.format != "ubj" && options.format != "json") {
    return InvalidArgument("must be \"ubj\" or \"json\"", "format");
  }
  if (!(options.test_fraction > 0 && options.test_fraction < 1)) {
    return InvalidArgument("must be between 0 and 1", "test_fraction");
  }
  if (options.kind != "transactions" && options.kind != "claims") {
    return InvalidArgument("must be \"transactions\" or \"claims\"", "kind");
  }
  Result<FeatureTable> table = options.kind == "claims" ? BuildClaimFeatureTable(GenerateClaims(options.claims_data))
                                                        : BuildFeatureTable(GenerateTransactions(options.data));
  if (!table.ok()) return table.error();
  const size_t rows = table->rows();
  const size_t train_rows = static_cast<size_t>(static_cast<double>(rows) * (1.0 - options.test_fraction));
  if (train_rows == 0 || train_rows == rows) return InvalidArgument("too little data to split; generate more", "data");

  DMatrix train, test;
  TXSCORE_RETURN_IF_ERROR(MakeDMatrix(*table, 0, train_rows, &train));
  TXSCORE_RETURN_IF_ERROR(MakeDMatrix(*table, train_rows, rows, &test));

  Booster booster;
  DMatrixHandle train_handle = train.get();
  if (XGBoosterCreate(&train_handle, 1, booster.out()) != 0) return XGBoostFailure("XGBoosterCreate");
  const std::pair<std::string, std::string> params[] = {
      {"tree_method", "hist"},
      {"objective", "binary:logistic"},
      {"max_depth", std::to_string(options.max_depth)},
      {"eta", std::to_string(options.learning_rate)},
      {"nthread", std::to_string(options.nthread)},
      {"seed", std::to_string(options.kind == "claims" ? options.claims_data.seed : options.data.seed)},
      {"eval_metric", "aucpr"},
  };
  for (const auto& [name, value] : params) {
    if (XGBoosterSetParam(booster.get(), name.c_str(), value.c_str()) != 0) {
      return XGBoostFailure("XGBoosterSetParam(" + name + ")");
    }
  }
  for (int round = 0; round < options.rounds; ++round) {
    if (XGBoosterUpdateOneIter(booster.get(), round, train.get()) != 0) return XGBoostFailure("XGBoosterUpdateOneIter");
    if (progress) progress(round + 1, options.rounds);
  }

  const char* config =
      "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, \"strict_shape\": false}";
  const bst_ulong* shape = nullptr;
  bst_ulong dims = 0;
  const float* predictions = nullptr;
  if (XGBoosterPredictFromDMatrix(booster.get(), test.get(), config, &shape, &dims, &predictions) != 0) {
    return XGBoostFailure("XGBoosterPredictFromDMatrix");
  }
  const std::vector<float> test_scores(predictions, predictions + (rows - train_rows));
  const std::vector<float> test_labels(table->labels.begin() + static_cast<std::ptrdiff_t>(train_rows),
                                       table->labels.end());

  TrainReport report;
  report.roc_auc = RocAuc(test_scores, test_labels);
  report.pr_auc = AveragePrecision(test_scores, test_labels);
  report.train_rows = train_rows;
  report.test_rows = rows - train_rows;
  report.train_fraud_rate = Mean(table->labels, 0, train_rows);
  report.test_fraud_rate = Mean(table->labels, train_rows, rows);

  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) return Internal("cannot create " + options.out_dir + ": " + ec.message());
  const std::filesystem::path dir(options.out_dir);
  report.model_path = (dir / (options.model_name + "." + options.format)).string();
  report.schema_path = SchemaPathForModel(report.model_path);
  report.metrics_path = (dir / (options.model_name + ".metrics.json")).string();

  // Write to temporary names and rename, so a crash never leaves a model without its schema
  // or a half-written model under the real name.
  const std::string tmp_model = (dir / (options.model_name + ".tmp." + options.format)).string();
  if (XGBoosterSaveModel(booster.get(), tmp_model.c_str()) != 0) return XGBoostFailure("XGBoosterSaveModel");
  TXSCORE_RETURN_IF_ERROR(table->schema.Save(report.schema_path + ".tmp"));
  nlohmann::json metrics = {
      {"model", std::filesystem::path(report.model_path).filename().string()},
      {"roc_auc", report.roc_auc},
      {"pr_auc", report.pr_auc},
      {"train_rows", report.train_rows},
      {"test_rows", report.test_rows},
      {"train_fraud_rate", report.train_fraud_rate},
      {"test_fraud_rate", report.test_fraud_rate},
      {"split", "time-ordered; the newest " + std::to_string(options.test_fraction) + " held out"},
      {"params",
       {{"rounds", options.rounds},
        {"max_depth", options.max_depth},
        {"eta", options.learning_rate},
        {"tree_method", "hist"}}},
  };
  if (options.kind == "claims") {
    metrics["data"] = {{"kind", "claims"},
                       {"seed", options.claims_data.seed},
                       {"claims", options.claims_data.claims},
                       {"fraud_rate", options.claims_data.fraud_rate}};
  } else {
    metrics["data"] = {{"kind", "transactions"},
                       {"seed", options.data.seed},
                       {"cards", options.data.cards},
                       {"days", options.data.days}};
  }
  {
    std::ofstream out(report.metrics_path + ".tmp", std::ios::trunc);
    out << metrics.dump(2) << "\n";
    if (!out) return Internal("cannot write " + report.metrics_path);
  }
  std::filesystem::rename(report.schema_path + ".tmp", report.schema_path, ec);
  if (!ec) std::filesystem::rename(tmp_model, report.model_path, ec);
  if (!ec) std::filesystem::rename(report.metrics_path + ".tmp", report.metrics_path, ec);
  if (ec) return Internal("cannot move the trained model into " + options.out_dir + ": " + ec.message());
  return report;
}

}  // namespace txscore::fraud
