// Checks the trees of an XGBoost model document before libxgboost sees it.
//
// Why: XGBoost 1.7 trusts the tree arrays it loads. A corrupt model (a flipped bit, a cut file)
// whose child links form a cycle overflows its stack; a child index out of range is read while
// predicting: both crash the process instead of failing. Every tree is walked here first.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"

namespace txscore::fraud {

// OK when every tree of the (JSON or UBJSON-decoded) model document is well formed: its arrays
// as long as tree_param.num_nodes says, every child index in range, every node reached exactly
// once from the root (no cycle, no shared node), depth at most 64, split features below the
// model's num_feature, categorical split tables within bounds. Otherwise kDataLoss naming
// `source`, the tree and the node.
Status CheckXGBoostTrees(const nlohmann::json& doc, const std::string& source);

}  // namespace txscore::fraud
