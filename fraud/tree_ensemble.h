// A fast evaluator for XGBoost tree ensembles: margin, probability and approximate (Saabas)
// per-feature contributions in one walk per tree, with no allocation and no locks.
//
// XGBoost's C API costs ~30 us per single-row prediction and ~75 us per contribution call on
// this project's machines (JSON parsing of the call's arguments, DMatrix creation, buffer
// management); walking 200 depth-6 trees directly takes a few microseconds. XGBoost stays
// the reference: the model is loaded and validated by XGBoost, exported by it as JSON, and
// the tests require both evaluators to agree.
//
// Supported: gbtree boosters with the binary:logistic or reg:logistic objective, one output,
// numerical splits. Anything else is refused (kFailedPrecondition) and the caller falls back
// to the C API.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::fraud {

class TreeEnsemble {
 public:
  // `json` is a model as XGBoost writes it (XGBoosterSaveModelToBuffer, format "json").
  static Result<TreeEnsemble> FromXGBoostJson(std::string_view json);

  // Raw score (log-odds) for one row of num_features() floats; NaN is missing.
  float Margin(const float* row) const;
  // Probability, as XGBoost's binary:logistic transform gives it.
  float Probability(const float* row) const;
  // out[0..num_features()) gets each feature's contribution in log-odds and out[num_features()]
  // the bias; they sum to Margin(row). Same definition as XGBoost's approx_contribs.
  void Contributions(const float* row, float* out) const;

  size_t num_features() const { return num_features_; }
  size_t num_trees() const { return tree_roots_.size(); }
  int max_depth() const { return max_depth_; }  // splits on the longest root-to-leaf path

 private:
  struct Node {
    int32_t left = -1;  // index into nodes_, -1 for a leaf
    int32_t right = -1;
    uint32_t feature = 0;
    float value = 0;  // split threshold (go left when x < value), or the leaf value
    float mean = 0;   // cover-weighted mean of the leaves below (for contributions)
    bool default_left = false;
  };

  static constexpr int kMaxDepth = 128;

  int32_t Next(const Node& node, const float* row) const;
  Status FillMeans(int32_t offset, int32_t index, const std::vector<float>& hessian, int depth);

  std::vector<Node> nodes_;
  std::vector<int32_t> tree_roots_;
  size_t num_features_ = 0;
  float base_margin_ = 0;
  int max_depth_ = 0;
};

}  // namespace txscore::fraud
