#include "fraud/xgboost_tree_check.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace txscore::fraud {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxNodes = 1 << 24;
constexpr int kMaxDepth = 64;

// A non-negative integer XGBoost writes as a string ("19") or a number.
bool ReadCount(const json* value, int64_t* out) {
  if (value == nullptr) return false;
  if (value->is_number_integer()) {
    *out = value->get<int64_t>();
  } else if (value->is_string()) {
    const std::string text = value->get<std::string>();
    char* end = nullptr;
    *out = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') return false;
  } else {
    return false;
  }
  return *out >= 0 && *out <= kMaxNodes;
}

const json* Find(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// An array of integers of exactly `length` entries.
bool IntArray(const json* value, int64_t length, std::vector<int64_t>* out) {
  if (value == nullptr || !value->is_array() || static_cast<int64_t>(value->size()) != length) return false;
  out->clear();
  out->reserve(value->size());
  for (const json& v : *value) {
    if (!v.is_number_integer()) return false;
    out->push_back(v.get<int64_t>());
  }
  return true;
}

Status CheckTree(const json& tree, int64_t index, int64_t num_feature, const std::string& source) {
  const std::string where = source + ": tree " + std::to_string(index);
  auto fail = [&](const std::string& what) { return DataLoss(where + ": " + what); };
  int64_t nodes = 0, deleted = 0, leaf_vector = 0, tree_features = 0;
  const json* param = Find(tree, "tree_param");
  if (param == nullptr || !ReadCount(Find(*param, "num_nodes"), &nodes) || nodes < 1) {
    return fail("tree_param.num_nodes is missing or out of range");
  }
  if (const json* v = Find(*param, "num_deleted"); v != nullptr && (!ReadCount(v, &deleted) || deleted != 0)) {
    return fail("tree_param.num_deleted is not 0");
  }
  if (const json* v = Find(*param, "size_leaf_vector");
      v != nullptr && (!ReadCount(v, &leaf_vector) || leaf_vector != 0)) {
    return fail("tree_param.size_leaf_vector is not 0");
  }
  if (const json* v = Find(*param, "num_feature");
      v != nullptr && (!ReadCount(v, &tree_features) || tree_features != num_feature)) {
    return fail("tree_param.num_feature differs from the model's");
  }
  if (const json* id = Find(tree, "id"); id != nullptr && (!id->is_number_integer() || id->get<int64_t>() != index)) {
    return fail("its id is not its position");
  }
  std::vector<int64_t> left, right, split;
  if (!IntArray(Find(tree, "left_children"), nodes, &left)) return fail("left_children is not num_nodes integers");
  if (!IntArray(Find(tree, "right_children"), nodes, &right)) return fail("right_children is not num_nodes integers");
  if (!IntArray(Find(tree, "split_indices"), nodes, &split)) return fail("split_indices is not num_nodes integers");
  for (const char* key :
       {"split_conditions", "default_left", "base_weights", "parents", "split_type", "loss_changes", "sum_hessian"}) {
    const json* array = Find(tree, key);
    if (array != nullptr && (!array->is_array() || static_cast<int64_t>(array->size()) != nodes)) {
      return fail(std::string(key) + " does not hold num_nodes entries");
    }
  }
  if (Find(tree, "split_conditions") == nullptr) return fail("split_conditions is missing");
  // Walk from the root: every node exactly once, children in range, depth bounded; each node's
  // parent as the walk finds it (XGBoost indexes with the stored parents while loading).
  std::vector<char> seen(static_cast<size_t>(nodes), 0);
  std::vector<int64_t> parent_of(static_cast<size_t>(nodes), -1);
  std::vector<std::pair<int64_t, int>> stack = {{0, 0}};
  int64_t reached = 0;
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    const std::string at = "node " + std::to_string(node);
    if (seen[static_cast<size_t>(node)]) return fail(at + " is reached twice (a cycle or a shared child)");
    seen[static_cast<size_t>(node)] = 1;
    ++reached;
    const int64_t l = left[static_cast<size_t>(node)], r = right[static_cast<size_t>(node)];
    if (l == -1 && r == -1) continue;  // a leaf
    if (l < 0 || r < 0 || l >= nodes || r >= nodes) return fail(at + " has a child index out of range");
    if (depth + 1 > kMaxDepth) return fail(at + " is deeper than " + std::to_string(kMaxDepth));
    if (split[static_cast<size_t>(node)] < 0 || split[static_cast<size_t>(node)] >= num_feature) {
      return fail(at + " splits on feature " + std::to_string(split[static_cast<size_t>(node)]) + " of " +
                  std::to_string(num_feature));
    }
    stack.push_back({l, depth + 1});
    stack.push_back({r, depth + 1});
    if (l != r) {
      parent_of[static_cast<size_t>(l)] = node;
      parent_of[static_cast<size_t>(r)] = node;
    }
  }
  if (reached != nodes) return fail(std::to_string(nodes - reached) + " node(s) are not reachable from the root");
  std::vector<int64_t> parents;
  if (Find(tree, "parents") != nullptr) {
    if (!IntArray(Find(tree, "parents"), nodes, &parents)) return fail("parents is not num_nodes integers");
    if (parents[0] != -1 && parents[0] != 2147483647) return fail("the root has a parent");
    for (int64_t n = 1; n < nodes; ++n) {
      if (parents[static_cast<size_t>(n)] != parent_of[static_cast<size_t>(n)]) {
        return fail("node " + std::to_string(n) + " names node " + std::to_string(parents[static_cast<size_t>(n)]) +
                    " as its parent, but is a child of node " + std::to_string(parent_of[static_cast<size_t>(n)]));
      }
    }
  }
  for (const char* key : {"split_type", "default_left"}) {
    const json* flags = Find(tree, key);
    if (flags == nullptr) continue;
    for (const json& v : *flags) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1)
        return fail(std::string(key) + " holds a value other than 0 and 1");
    }
  }
  // Categorical splits: the tables must index within themselves and the tree.
  std::vector<int64_t> categories, cat_nodes, segments, sizes;
  const json* all = Find(tree, "categories");
  const json* cn = Find(tree, "categories_nodes");
  const json* cs = Find(tree, "categories_segments");
  const json* cz = Find(tree, "categories_sizes");
  if (all != nullptr || cn != nullptr || cs != nullptr || cz != nullptr) {
    if (all == nullptr || cn == nullptr || cs == nullptr || cz == nullptr || !all->is_array() || !cn->is_array() ||
        !IntArray(all, static_cast<int64_t>(all->size()), &categories) ||
        !IntArray(cn, static_cast<int64_t>(cn->size()), &cat_nodes) ||
        !IntArray(cs, static_cast<int64_t>(cn->size()), &segments) ||
        !IntArray(cz, static_cast<int64_t>(cn->size()), &sizes)) {
      return fail("the categorical split tables are inconsistent");
    }
    for (size_t i = 0; i < cat_nodes.size(); ++i) {
      if (cat_nodes[i] < 0 || cat_nodes[i] >= nodes || segments[i] < 0 || sizes[i] < 0 ||
          segments[i] + sizes[i] > static_cast<int64_t>(categories.size())) {
        return fail("categorical split " + std::to_string(i) + " indexes outside its tables");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckXGBoostTrees(const json& doc, const std::string& source) {
  const json* learner = Find(doc, "learner");
  const json* params = learner ? Find(*learner, "learner_model_param") : nullptr;
  int64_t num_feature = 0;
  if (params == nullptr || !ReadCount(Find(*params, "num_feature"), &num_feature) || num_feature < 1) {
    return DataLoss(source + ": learner.learner_model_param.num_feature is missing or out of range");
  }
  const json* booster = Find(*learner, "gradient_booster");
  if (booster == nullptr) return DataLoss(source + ": learner.gradient_booster is missing");
  if (const json* dart_inner = Find(*booster, "gbtree")) booster = dart_inner;  // dart wraps a gbtree
  const json* model = Find(*booster, "model");
  const json* trees = model ? Find(*model, "trees") : nullptr;
  if (trees == nullptr || !trees->is_array()) return DataLoss(source + ": the model holds no trees array");
  // XGBoost sizes and indexes by these counts while predicting: they must agree with the trees.
  int64_t num_class = 0, num_target = 1, num_trees = 0, parallel = 1, leaf_vector = 0;
  if (const json* v = Find(*params, "num_class"); v != nullptr && !ReadCount(v, &num_class)) {
    return DataLoss(source + ": learner_model_param.num_class is out of range");
  }
  if (const json* v = Find(*params, "num_target"); v != nullptr && (!ReadCount(v, &num_target) || num_target < 1)) {
    return DataLoss(source + ": learner_model_param.num_target is out of range");
  }
  const int64_t groups = std::max<int64_t>({1, num_class, num_target});
  const json* model_param = Find(*model, "gbtree_model_param");
  if (model_param == nullptr || !ReadCount(Find(*model_param, "num_trees"), &num_trees) ||
      num_trees != static_cast<int64_t>(trees->size())) {
    return DataLoss(source + ": gbtree_model_param.num_trees does not match the " + std::to_string(trees->size()) +
                    " trees");
  }
  if (const json* v = Find(*model_param, "num_parallel_tree");
      v != nullptr && (!ReadCount(v, &parallel) || parallel < 1)) {
    return DataLoss(source + ": gbtree_model_param.num_parallel_tree is out of range");
  }
  if (const json* v = Find(*model_param, "size_leaf_vector");
      v != nullptr && (!ReadCount(v, &leaf_vector) || leaf_vector != 0)) {
    return DataLoss(source + ": vector leaves (size_leaf_vector) are not supported");
  }
  const json* tree_info = Find(*model, "tree_info");
  if (tree_info == nullptr || !tree_info->is_array() || tree_info->size() != trees->size()) {
    return DataLoss(source + ": tree_info does not hold one entry per tree");
  }
  for (const json& group : *tree_info) {
    if (!group.is_number_integer() || group.get<int64_t>() < 0 || group.get<int64_t>() >= groups) {
      return DataLoss(source + ": tree_info names an output group out of range");
    }
  }
  int64_t index = 0;
  for (const json& tree : *trees) TXSCORE_RETURN_IF_ERROR(CheckTree(tree, index++, num_feature, source));
  return Status::Ok();
}

}  // namespace txscore::fraud
