#include "fraud/tree_ensemble.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace txscore::fraud {
namespace {

using nlohmann::json;

// XGBoost writes numbers of its model parameters as strings ("5E-1").
Result<double> NumberParam(const json& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end()) return DataLoss(std::string("XGBoost model lacks ") + key);
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {
    const std::string text = it->get<std::string>();
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() && *end == '\0') return v;
  }
  return DataLoss(std::string("XGBoost model parameter ") + key + " is not a number");
}

}  // namespace

Result<TreeEnsemble> TreeEnsemble::FromXGBoostJson(std::string_view text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return DataLoss("XGBoost model JSON does not parse");
  TreeEnsemble ensemble;
  try {
    const json& learner = doc.at("learner");
    const std::string objective = learner.at("objective").at("name").get<std::string>();
    if (objective != "binary:logistic" && objective != "reg:logistic") {
      return FailedPrecondition("objective " + objective + " is not supported by the fast evaluator");
    }
    const json& booster = learner.at("gradient_booster");
    if (booster.at("name").get<std::string>() != "gbtree") {
      return FailedPrecondition("booster " + booster.at("name").get<std::string>() +
                                " is not supported by the fast evaluator");
    }
    const json& params = learner.at("learner_model_param");
    Result<double> num_class = NumberParam(params, "num_class");
    Result<double> num_feature = NumberParam(params, "num_feature");
    Result<double> base_score = NumberParam(params, "base_score");
    if (!num_class.ok()) return num_class.error();
    if (!num_feature.ok()) return num_feature.error();
    if (!base_score.ok()) return base_score.error();
    if (*num_class > 1) return FailedPrecondition("multi-class models are not supported by the fast evaluator");
    if (!(*base_score > 0 && *base_score < 1)) return DataLoss("base_score must be a probability for a logistic model");
    ensemble.num_features_ = static_cast<size_t>(*num_feature);
    // XGBoost turns the base score (a probability) into a margin with the logit, in float.
    const float base = static_cast<float>(*base_score);
    ensemble.base_margin_ = -std::log(1.0f / base - 1.0f);

    for (const json& tree : booster.at("model").at("trees")) {
      const auto left = tree.at("left_children").get<std::vector<int32_t>>();
      const auto right = tree.at("right_children").get<std::vector<int32_t>>();
      const auto feature = tree.at("split_indices").get<std::vector<int64_t>>();
      const auto value = tree.at("split_conditions").get<std::vector<float>>();
      const auto default_left = tree.at("default_left").get<std::vector<int>>();
      const auto hessian = tree.at("sum_hessian").get<std::vector<float>>();
      const auto split_type = tree.value("split_type", std::vector<int>());
      const size_t n = left.size();
      if (n == 0 || right.size() != n || feature.size() != n || value.size() != n || default_left.size() != n ||
          hessian.size() != n) {
        return DataLoss("XGBoost tree arrays have inconsistent lengths");
      }
      const int32_t offset = static_cast<int32_t>(ensemble.nodes_.size());
      for (size_t i = 0; i < n; ++i) {
        if (!split_type.empty() && split_type[i] != 0) {
          return FailedPrecondition("categorical splits are not supported by the fast evaluator");
        }
        const bool leaf = left[i] == -1;
        if (!leaf &&
            (left[i] <= 0 || right[i] <= 0 || static_cast<size_t>(left[i]) >= n || static_cast<size_t>(right[i]) >= n ||
             feature[i] < 0 || static_cast<size_t>(feature[i]) >= ensemble.num_features_)) {
          return DataLoss("XGBoost tree node " + std::to_string(i) + " points outside its tree or feature range");
        }
        Node node;
        node.left = leaf ? -1 : offset + left[i];
        node.right = leaf ? -1 : offset + right[i];
        node.feature = leaf ? 0 : static_cast<uint32_t>(feature[i]);
        node.value = value[i];
        node.default_left = default_left[i] != 0;
        ensemble.nodes_.push_back(node);
      }
      // Cover-weighted means of the leaves below each node, computed from the root down
      // (XGBoost may reuse deleted node slots, so numbering says nothing about depth).
      Status means = ensemble.FillMeans(offset, offset, hessian, 0);
      if (!means.ok()) return means.error();
      ensemble.tree_roots_.push_back(offset);
    }
  } catch (const json::exception& e) {
    return DataLoss(std::string("XGBoost model JSON has an unexpected shape: ") + e.what());
  }
  return ensemble;
}

Status TreeEnsemble::FillMeans(int32_t offset, int32_t index, const std::vector<float>& hessian, int depth) {
  if (depth > kMaxDepth)
    return DataLoss("XGBoost tree is deeper than " + std::to_string(kMaxDepth) + " or has a cycle");
  Node& node = nodes_[index];
  if (node.left < 0) {
    max_depth_ = std::max(max_depth_, depth);
    node.mean = node.value;
    return Status::Ok();
  }
  TXSCORE_RETURN_IF_ERROR(FillMeans(offset, node.left, hessian, depth + 1));
  TXSCORE_RETURN_IF_ERROR(FillMeans(offset, node.right, hessian, depth + 1));
  const float left_cover = hessian[node.left - offset];
  const float right_cover = hessian[node.right - offset];
  nodes_[index].mean =
      (nodes_[node.left].mean * left_cover + nodes_[node.right].mean * right_cover) / hessian[index - offset];
  return Status::Ok();
}

int32_t TreeEnsemble::Next(const Node& node, const float* row) const {
  const float x = row[node.feature];
  if (std::isnan(x)) return node.default_left ? node.left : node.right;
  return x < node.value ? node.left : node.right;
}

float TreeEnsemble::Margin(const float* row) const {
  float margin = base_margin_;
  for (int32_t root : tree_roots_) {
    const Node* node = &nodes_[root];
    while (node->left >= 0) node = &nodes_[Next(*node, row)];
    margin += node->value;
  }
  return margin;
}

float TreeEnsemble::Probability(const float* row) const { return 1.0f / (1.0f + std::exp(-Margin(row))); }

void TreeEnsemble::Contributions(const float* row, float* out) const {
  for (size_t i = 0; i <= num_features_; ++i) out[i] = 0;
  out[num_features_] = base_margin_;
  for (int32_t root : tree_roots_) {
    const Node* node = &nodes_[root];
    out[num_features_] += node->mean;
    while (node->left >= 0) {
      const Node* child = &nodes_[Next(*node, row)];
      out[node->feature] += child->mean - node->mean;
      node = child;
    }
  }
}

}  // namespace txscore::fraud
