#include "pipelines/stages/xgboost_stage.h"

#include <array>

#include "fraud/xgboost_model.h"
#include "pipelines/decision.h"

namespace txscore::pipelines {
namespace {

// How many of its contributions the stage reports as `reasons`.
constexpr int kModelReasons = 3;

class PreparedXGBoostStage : public PreparedStage {
 public:
  PreparedXGBoostStage(std::unique_ptr<fraud::XGBoostModel> model, std::string device)
      : model_(std::move(model)), device_(std::move(device)) {}

  Status Run(const StageInputs& inputs, const ScoredItem&, StageOutputs* out, StageReport* report) const override {
    std::array<float, fraud::kFeatureCount> row;
    model_->schema().Select(inputs.Get(0)->features, row.data());
    TXSCORE_ASSIGN_OR_RETURN(std::vector<float> prediction, model_->Predict(row.data(), 1));
    TXSCORE_ASSIGN_OR_RETURN(std::vector<float> contributions, model_->Contributions(row.data()));
    out->score = prediction[0];
    out->contributions = NamedContributions(contributions, row.data(), model_->schema());
    out->reasons = TopReasons(out->contributions, kModelReasons);
    report->device = device_;
    return Status::Ok();
  }
  std::optional<ModelVersion> model() const override {
    return ModelVersion{model_->model_id(), model_->model_version()};
  }
  // One input per feature the model reads, in its column order; the score, and the names of
  // the features that pushed it most (the `reasons`).
  std::optional<ModelSignature> signature() const override {
    ModelSignature signature{.platform = "xgboost"};
    for (fraud::FeatureId feature : model_->schema().features()) {
      signature.inputs.push_back({std::string(fraud::FeatureName(feature)), "FP32", {-1}});
    }
    signature.outputs = {{"score", "FP32", {-1}}, {"reasons", "BYTES", {-1, kModelReasons}}};
    return signature;
  }
  std::string Describe() const override {
    return "model " + model_->model_id() + "@" + model_->model_version() + " (" +
           std::to_string(model_->schema().size()) + " features) on " + device_;
  }

 private:
  std::unique_ptr<fraud::XGBoostModel> model_;
  std::string device_;
};

class XGBoostStageKind : public StageKind {
 public:
  XGBoostStageKind() {
    spec_.kind = "xgboost";
    spec_.inputs = {{"features", ValueType::kFeatures}};
    spec_.outputs = {
        {"score", ValueType::kNumber}, {"contributions", ValueType::kContributions}, {"reasons", ValueType::kReasons}};
    spec_.keys = {"model", "schema", "placement", "threads", "evaluator", "budget_ms"};
    spec_.reports_score = true;
  }
  const StageKindSpec& spec() const override { return spec_; }

  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& r, const YAML::Node& stage,
                                                     const StageDeclaration&) const override {
    auto m = std::make_shared<XGBoostStageSettings>();
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "model", true, YamlReader::PathMustBe::kRegularFile, &m->model_path));
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "schema", false, YamlReader::PathMustBe::kRegularFile, &m->schema_path));
    TXSCORE_RETURN_IF_ERROR(ReadPlacement(r, stage, &m->placement));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "threads", 1, 256, &m->nthread));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "budget_ms", 1, 600000, &m->budget_ms));
    if (stage["evaluator"]) {
      std::string evaluator;
      TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "evaluator", false, &evaluator));
      if (evaluator != "fast" && evaluator != "xgboost") {
        return r.ErrorAt(stage["evaluator"], "evaluator must be \"fast\" or \"xgboost\", not \"" + evaluator + "\"");
      }
      m->fast_evaluator = evaluator == "fast";
    }
    return std::shared_ptr<const StageSettings>(std::move(m));
  }

  // Sized from the model itself: trees, depth and features.
  Result<std::optional<accelerator::StageWorkload>> Workload(const StageSettings& settings) const override {
    const auto& m = static_cast<const XGBoostStageSettings&>(settings);
    fraud::XGBoostModelOptions options;
    options.schema_path = m.schema_path;
    options.fast_evaluator = true;  // to size the ensemble
    TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<fraud::XGBoostModel> model,
                             fraud::XGBoostModel::Load(m.model_path, options));
    const int trees = static_cast<int>(model->num_trees());
    return std::optional<accelerator::StageWorkload>(accelerator::TreeEnsembleWorkload(
        m.name, trees > 0 ? trees : 1, model->max_depth() > 0 ? model->max_depth() : 6,
        static_cast<int>(model->schema().size())));
  }

  std::vector<StageFile> Files(const StageSettings& settings) const override {
    const auto& m = static_cast<const XGBoostStageSettings&>(settings);
    return {{"model", m.model_path},
            {"schema", m.schema_path.empty() ? fraud::SchemaPathForModel(m.model_path) : m.schema_path}};
  }

  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings,
                                                 const PrepareContext& context) const override {
    const auto& m = static_cast<const XGBoostStageSettings&>(settings);
    fraud::XGBoostModelOptions options;
    options.nthread = m.nthread;
    options.schema_path = m.schema_path;
    options.fast_evaluator = m.fast_evaluator;
    TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<fraud::XGBoostModel> model,
                             fraud::XGBoostModel::Load(m.model_path, options));
    const std::string device = context.placement != nullptr ? context.placement->device : "cpu";
    return std::unique_ptr<PreparedStage>(new PreparedXGBoostStage(std::move(model), device));
  }

 private:
  StageKindSpec spec_;
};

}  // namespace

std::unique_ptr<StageKind> MakeXGBoostStageKind() { return std::make_unique<XGBoostStageKind>(); }

}  // namespace txscore::pipelines
