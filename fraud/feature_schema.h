// A model's feature schema: which features it reads, in which order, with which types.
//
// Stored as JSON beside the model (`fraud.json` -> `fraud.features.json`):
//   {"format": "txscore.feature_schema/1",
//    "features": [{"name": "log_amount", "type": "float"}, ...]}
// Names are FeatureName() values; a model trained elsewhere (Python's xgboost, say) may use
// any subset in any order, as long as its schema says so.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/features.h"

namespace txscore::fraud {

class FeatureSchema {
 public:
  // Every feature txscore computes, in FeatureId order.
  static FeatureSchema AllFeatures();
  // The features of a transaction (what the fraud trainer uses), and of a claim.
  static FeatureSchema TransactionFeatures();
  static FeatureSchema ClaimFeatures();
  // kNotFound for a missing file; kInvalidArgument naming the file and entry otherwise.
  static Result<FeatureSchema> Load(const std::string& path);
  static Result<FeatureSchema> Parse(const std::string& json_text, const std::string& source_name);

  std::string ToJson() const;
  Status Save(const std::string& path) const;

  // Copies the schema's features out of `all`, in schema order, into out[0..size()).
  void Select(const FeatureVector& all, float* out) const;

  size_t size() const { return features_.size(); }
  FeatureId at(size_t i) const { return features_[i]; }
  const std::vector<FeatureId>& features() const { return features_; }

 private:
  std::vector<FeatureId> features_;
};

// "models/fraud.ubj" -> "models/fraud.features.json".
std::string SchemaPathForModel(const std::string& model_path);

}  // namespace txscore::fraud
