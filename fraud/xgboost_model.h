// An XGBoost model loaded through XGBoost's C API, with its feature schema.
//
// XGBoost errors (return codes + XGBGetLastError) are converted to txscore Errors here and
// nowhere else. Thread safety: Predict and Contributions may be called concurrently (XGBoost
// keeps prediction buffers per thread); Load warms the model so that the first request does
// not race XGBoost's lazy configuration.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/feature_schema.h"
#include "fraud/tree_ensemble.h"

namespace txscore::fraud {

struct XGBoostModelOptions {
  // Threads XGBoost may use per call. Default: 1, the fastest for single rows (threads cost
  // more to wake than a few hundred trees take to walk).
  int nthread = 1;
  // Feature schema file; empty means SchemaPathForModel(model_path).
  std::string schema_path;
  // Score with txscore's TreeEnsemble when the model allows (see tree_ensemble.h), XGBoost's
  // C API otherwise. Default: true.
  bool fast_evaluator = true;
  // Default: 512 MiB. A model file larger than this is refused before a byte of it is read
  // (the demo's fraud model is 400 KB): a stray large file would otherwise cost its size in
  // memory, and seconds, at every start and reload that reads it.
  size_t max_file_bytes = size_t{512} << 20;
  // Tests: called once the model file's bytes are read and checked, before XGBoost loads them
  // (to change the file in between). Default: none.
  std::function<void()> after_check;
  // Tests: called once the model file's bytes are read, before the file is looked at again to
  // see that it did not change meanwhile (to change it in between). Default: none.
  std::function<void()> after_read;
};

class XGBoostModel {
 public:
  // Loads a JSON (.json) or UBJSON (.ubj) model and its schema. Refuses a model whose
  // feature count differs from its schema's, naming both numbers.
  static Result<std::unique_ptr<XGBoostModel>> Load(const std::string& model_path,
                                                    const XGBoostModelOptions& options = {});
  ~XGBoostModel();
  XGBoostModel(const XGBoostModel&) = delete;
  XGBoostModel& operator=(const XGBoostModel&) = delete;

  // Probabilities for `rows` rows of schema().size() floats each (NaN = missing).
  Result<std::vector<float>> Predict(const float* rows, size_t row_count) const;
  // Approximate (Saabas) per-feature contributions in log-odds for one row:
  // schema().size() values followed by the bias.
  Result<std::vector<float>> Contributions(const float* row) const;

  // The same through XGBoost's C API (in-place prediction; approx_contribs), whatever
  // evaluator() says: the reference the fast evaluator is tested and benchmarked against.
  Result<std::vector<float>> PredictWithXGBoost(const float* rows, size_t row_count) const;
  Result<std::vector<float>> ContributionsWithXGBoost(const float* row) const;

  // "tree_ensemble" (txscore's evaluator) or "xgboost" (the C API).
  const char* evaluator() const { return ensemble_ ? "tree_ensemble" : "xgboost"; }

  const FeatureSchema& schema() const { return schema_; }
  // Size of the ensemble, for placement; zero when the C API scores it (no tree evaluator).
  size_t num_trees() const { return ensemble_ ? ensemble_->num_trees() : 0; }
  int max_depth() const { return ensemble_ ? ensemble_->max_depth() : 0; }
  // File name without extension, e.g. "fraud".
  const std::string& model_id() const { return model_id_; }
  // First 12 hex digits of the SHA-256 of the model file: changes whenever the model does.
  const std::string& model_version() const { return model_version_; }

 private:
  XGBoostModel() = default;

  void* booster_ = nullptr;  // BoosterHandle; kept opaque so this header needs no XGBoost
  FeatureSchema schema_;
  std::string model_id_;
  std::string model_version_;
  std::unique_ptr<TreeEnsemble> ensemble_;  // null: score through the C API
  std::string predict_config_;
  std::string contributions_config_;
};

// The XGBoost error text of the last failed C API call on this thread.
std::string LastXGBoostError();

}  // namespace txscore::fraud
