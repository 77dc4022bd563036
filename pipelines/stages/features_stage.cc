#include "pipelines/stages/features_stage.h"

#include "fraud/features.h"

namespace txscore::pipelines {
namespace {

class PreparedFeaturesStage : public PreparedStage {
 public:
  explicit PreparedFeaturesStage(ItemKind items) : items_(items) {}
  Status Run(const StageInputs&, const ScoredItem& item, StageOutputs* out, StageReport*) const override {
    out->features = items_ == ItemKind::kTransaction ? fraud::ComputeFeatures(*item.transaction, *item.card_state)
                                                     : fraud::ComputeClaimFeatures(*item.claim, item.provider_claims);
    return Status::Ok();
  }
  std::string Describe() const override {
    return items_ == ItemKind::kTransaction ? "transaction features" : "claim features";
  }

 private:
  ItemKind items_;
};

class FeaturesStageKind : public StageKind {
 public:
  explicit FeaturesStageKind(ItemKind items) : items_(items) {
    spec_.kind = items == ItemKind::kTransaction ? "features" : "claim_features";
    spec_.outputs = {{"features", ValueType::kFeatures}};
    spec_.transactions = items == ItemKind::kTransaction;
    spec_.claims = items == ItemKind::kClaim;
  }
  const StageKindSpec& spec() const override { return spec_; }
  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader&, const YAML::Node&,
                                                     const StageDeclaration&) const override {
    return std::shared_ptr<const StageSettings>(std::make_shared<StageSettings>());
  }
  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings&, const PrepareContext&) const override {
    return std::unique_ptr<PreparedStage>(new PreparedFeaturesStage(items_));
  }

 private:
  ItemKind items_;
  StageKindSpec spec_;
};

}  // namespace

std::unique_ptr<StageKind> MakeTransactionFeaturesStageKind() {
  return std::make_unique<FeaturesStageKind>(ItemKind::kTransaction);
}
std::unique_ptr<StageKind> MakeClaimFeaturesStageKind() {
  return std::make_unique<FeaturesStageKind>(ItemKind::kClaim);
}

}  // namespace txscore::pipelines
