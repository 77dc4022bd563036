#include "pipelines/stages/blend_stage.h"

#include "pipelines/decision.h"

namespace txscore::pipelines {
namespace {

constexpr int kBlendReasons = 3;  // as a model stage's

class PreparedBlendStage : public PreparedStage {
 public:
  explicit PreparedBlendStage(std::vector<double> weights) : weights_(std::move(weights)) {}
  Status Run(const StageInputs& inputs, const ScoredItem&, StageOutputs* out, StageReport*) const override {
    const std::vector<int>& joined = inputs.Joined(0);
    const std::vector<double> equal(joined.size(), 1.0);
    Blend(inputs.values(), joined, weights_.empty() ? equal : weights_, out);
    out->reasons = TopReasons(out->contributions, kBlendReasons);
    return Status::Ok();
  }
  std::string Describe() const override {
    if (weights_.empty()) return "equal weights";
    std::string text = "weights";
    for (double w : weights_) text += " " + std::to_string(w);
    return text;
  }

 private:
  std::vector<double> weights_;
};

class BlendStageKind : public StageKind {
 public:
  BlendStageKind() {
    spec_.kind = "blend";
    spec_.inputs = {{"score", ValueType::kNumber, /*each_upstream=*/true},
                    {"contributions", ValueType::kContributions, /*each_upstream=*/true}};
    spec_.outputs = {
        {"score", ValueType::kNumber}, {"contributions", ValueType::kContributions}, {"reasons", ValueType::kReasons}};
    spec_.keys = {"weights"};
    spec_.reports_score = true;
  }
  const StageKindSpec& spec() const override { return spec_; }

  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& r, const YAML::Node& stage,
                                                     const StageDeclaration& d) const override {
    auto b = std::make_shared<BlendStageSettings>();
    if (const YAML::Node weights = stage["weights"]) {
      if (!weights.IsSequence() || weights.size() != d.after.size()) {
        return r.ErrorAt(weights, "weights: must be a list of " + std::to_string(d.after.size()) +
                                      " numbers, one per stage in after:");
      }
      double sum = 0;
      for (const YAML::Node& w : weights) {
        double value = 0;
        if (!w.IsScalar() || !YAML::convert<double>::decode(w, value) || !(value >= 0)) {
          return r.ErrorAt(w, "weights: each weight must be a number >= 0");
        }
        b->weights.push_back(value);
        sum += value;
      }
      if (!(sum > 0)) return r.ErrorAt(weights, "weights: at least one weight must be above 0");
    }
    return std::shared_ptr<const StageSettings>(std::move(b));
  }

  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings, const PrepareContext&) const override {
    return std::unique_ptr<PreparedStage>(
        new PreparedBlendStage(static_cast<const BlendStageSettings&>(settings).weights));
  }

 private:
  StageKindSpec spec_;
};

}  // namespace

std::unique_ptr<StageKind> MakeBlendStageKind() { return std::make_unique<BlendStageKind>(); }

}  // namespace txscore::pipelines
