#include "pipelines/stage_graph.h"

#include <gtest/gtest.h>

#include "pipelines/stage_kind.h"
#include "pipelines/stages/decision_stage.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// Builds graphs of the builtin kinds from compact declarations; each stage sits on its own
// line (line = position + 1) so errors can be checked by line.
class StageGraphTest : public ::testing::Test {
 protected:
  void SetUp() override { RegisterBuiltinStageKinds(&kinds_); }

  StageDeclaration Stage(const std::string& name, const std::string& kind, std::vector<std::string> after = {},
                         const std::string& when = "", std::map<std::string, std::string> inputs = {}) {
    StageDeclaration d;
    d.name = name;
    d.kind = kind;
    d.after = std::move(after);
    d.when = when;
    d.inputs = std::move(inputs);
    const int line = static_cast<int>(declared_.size()) + 1;
    d.at = {line, 5};
    d.after_at = {line, 20};
    d.inputs_at = {line, 40};
    d.when_at = {line, 60};
    return d;
  }
  void Add(StageDeclaration d) { declared_.push_back(std::move(d)); }
  Result<StageGraph> Build() { return StageGraph::Build(declared_, kinds_, "p.yaml"); }
  std::vector<std::string> Order(const StageGraph& graph) {
    std::vector<std::string> names;
    for (int i : graph.order()) names.push_back(graph.stage(i).name);
    return names;
  }

  StageKindRegistry kinds_;
  std::vector<StageDeclaration> declared_;
};

TEST_F(StageGraphTest, FanOutAndJoinRunUpstreamFirst) {
  // Written out of order on purpose: the order comes from the edges.
  Add(Stage("decision", "decision", {"blend"}));
  Add(Stage("blend", "blend", {"champion", "challenger"}));
  Add(Stage("challenger", "xgboost", {"features"}));
  Add(Stage("champion", "xgboost", {"features"}));
  Add(Stage("features", "features"));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  EXPECT_EQ(Order(*graph), (std::vector<std::string>{"features", "challenger", "champion", "blend", "decision"}));
  const GraphStage& blend = graph->stage(graph->Find("blend"));
  ASSERT_EQ(blend.inputs.size(), 2u);
  EXPECT_EQ(blend.inputs[0].input, "score");
  EXPECT_EQ(blend.inputs[0].stages, (std::vector<int>{graph->Find("champion"), graph->Find("challenger")}));
  EXPECT_EQ(graph->sink(), graph->Find("decision"));
  for (const GraphStage& s : graph->stages()) EXPECT_TRUE(s.required) << s.name;
}

TEST_F(StageGraphTest, OnlyStagesTheDecisionReadsAreRequired) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("shadow", "xgboost", {"features"}));
  Add(Stage("decision", "decision", {"fraud"}));
  Add(Stage("forensic", "llm_findings", {"decision"}, "decision.decision == REVIEW"));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  EXPECT_TRUE(graph->stage(graph->Find("fraud")).required);
  EXPECT_FALSE(graph->stage(graph->Find("shadow")).required);
  EXPECT_FALSE(graph->stage(graph->Find("forensic")).required);
  EXPECT_EQ(graph->InputStage(graph->Find("forensic"), 1), graph->Find("decision"));
}

TEST_F(StageGraphTest, CycleIsRejectedWithItsPath) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features", "decision"}));
  Add(Stage("decision", "decision", {"fraud"}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.error().message, "p.yaml:2:20: the stages form a cycle: fraud -> decision -> fraud");
}

TEST_F(StageGraphTest, UnknownUpstreamStageIsAMissingInput) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"featurs"}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.error().message,
            "p.yaml:2:20: stage \"fraud\" comes after \"featurs\", but there is no stage of that name");
}

TEST_F(StageGraphTest, InputNoUpstreamStageProvidesIsNamed) {
  Add(Stage("features", "features"));
  Add(Stage("decision", "decision", {"features"}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.error().message,
            "p.yaml:2:20: stage \"decision\" needs input \"score\" (number), and none of the stages it comes after "
            "(features) has an output \"score\"");
}

TEST_F(StageGraphTest, AmbiguousInputAsksForAChoiceOrABlend) {
  Add(Stage("features", "features"));
  Add(Stage("a", "xgboost", {"features"}));
  Add(Stage("b", "xgboost", {"features"}));
  Add(Stage("decision", "decision", {"a", "b"}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.error().message,
            "p.yaml:4:20: stage \"decision\": input \"score\" could come from a or b; choose one with inputs: "
            "{score: STAGE.score} or join them with a blend stage");
}

TEST_F(StageGraphTest, ExplicitInputsChooseAmongUpstreamStages) {
  Add(Stage("features", "features"));
  Add(Stage("a", "xgboost", {"features"}));
  Add(Stage("b", "xgboost", {"features"}));
  Add(Stage("decision", "decision", {"a", "b"}, "", {{"score", "b.score"}, {"contributions", "b.contributions"}}));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  EXPECT_EQ(graph->InputStage(graph->Find("decision"), 0), graph->Find("b"));
  // a only orders the decision: nothing of it is read, so the decision does not wait for it.
  EXPECT_TRUE(graph->stage(graph->Find("b")).required);
  EXPECT_FALSE(graph->stage(graph->Find("a")).required);
}

TEST_F(StageGraphTest, ExplicitInputOfTheWrongTypeIsATypeMismatch) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("decision", "decision", {"fraud"}, "", {{"score", "features.features"}}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(
      graph.error().message,
      "p.yaml:3:40: stage \"decision\": input \"score\" is of type number, but features.features is of type features");
}

TEST_F(StageGraphTest, ExplicitInputMustComeFromUpstream) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("shadow", "xgboost", {"features"}));
  Add(Stage("decision", "decision", {"fraud"}, "", {{"score", "shadow.score"}}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(
      graph.error().message,
      "p.yaml:4:40: stage \"decision\": input \"score\" reads \"shadow.score\", which is not an output of a stage "
      "upstream of it");
}

TEST_F(StageGraphTest, ConditionMayOnlyReadUpstreamOutputs) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("shadow", "xgboost", {"features"}, "decision.decision == REVIEW"));
  Add(Stage("decision", "decision", {"fraud"}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.error().message,
            "p.yaml:3:60: when: \"decision.decision\" is not an output of an earlier stage (available: "
            "features.features)");
}

TEST_F(StageGraphTest, StagesTheDecisionNeedsCannotBeConditional) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}, "features.features == 1"));
  Add(Stage("decision", "decision", {"fraud"}));
  auto graph = Build();
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.error().message,
            "p.yaml:2:60: when: features.features is of type features, which cannot be compared (only numbers and "
            "decisions can)");
  declared_[1].when = "fraud.score > 0.5";  // not upstream of itself
  EXPECT_EQ(Build().error().message.rfind("p.yaml:2:60: when: \"fraud.score\" is not an output", 0), 0u);
  declared_.insert(declared_.begin() + 2, Stage("gate", "xgboost", {"features"}));
  declared_[1].when = "gate.score > 0.5";
  declared_[1].after = {"features", "gate"};
  EXPECT_EQ(Build().error().message,
            "p.yaml:2:60: stage \"fraud\" cannot have a condition: the decision depends on it, and every request needs "
            "one");
}

TEST_F(StageGraphTest, ExactlyOneDecisionStage) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  EXPECT_EQ(Build().error().message, "p.yaml:1:1: a pipeline has exactly one decision stage; this one has 0");
  Add(Stage("d1", "decision", {"fraud"}));
  Add(Stage("d2", "decision", {"fraud"}));
  EXPECT_EQ(Build().error().message, "p.yaml:4:5: a pipeline has exactly one decision stage; this one has 2");
}

TEST_F(StageGraphTest, JoinNeedsTwoStages) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("blend", "blend", {"fraud"}));
  Add(Stage("decision", "decision", {"blend"}));
  EXPECT_EQ(Build().error().message,
            "p.yaml:3:20: stage \"blend\" joins \"score\" from at least two stages; it comes after only fraud");
}

TEST_F(StageGraphTest, UnknownKindAndDuplicateNamesAreRejected) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "random_forest", {"features"}));
  EXPECT_EQ(
      Build().error().message,
      "p.yaml:2:5: stage \"fraud\": unknown kind \"random_forest\" (known: blend, claim_features, decision, features, "
      "llm_findings, rules, xgboost)");
  declared_[1].name = "features";
  declared_[1].kind = "features";
  EXPECT_EQ(Build().error().message, "p.yaml:2:5: there are two stages named \"features\"");
}

TEST_F(StageGraphTest, ARulesVerdictTheDecisionReadsIsRequiredThoughItsInputIsOptional) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("rules", "rules", {"features"}));
  Add(Stage("decision", "decision", {"fraud", "rules"}));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  EXPECT_EQ(graph->stage(graph->Find("decision")).inputs[kDecisionVerdict].stages,
            std::vector<int>{graph->Find("rules")});
  EXPECT_TRUE(graph->stage(graph->Find("rules")).required);
  // So it cannot be conditional either: every request's decision reads its verdict.
  declared_[2].after = {"features", "fraud"};
  declared_[2].when = "fraud.score > 0.5";
  EXPECT_TRUE(testing::IsError(Build(), ErrorCode::kInvalidArgument,
                               "p.yaml:3:60: stage \"rules\" cannot have a condition: the decision depends on it, "
                               "and every request needs one"));
}

TEST_F(StageGraphTest, TheDecisionJoinsTheVerdictsOfEveryRulesStageItComesAfter) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("bank_rules", "rules", {"features"}));
  Add(Stage("scheme_rules", "rules", {"features"}));
  Add(Stage("decision", "decision", {"fraud", "scheme_rules", "bank_rules"}));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  EXPECT_EQ(graph->stage(graph->Find("decision")).inputs[kDecisionVerdict].stages,
            (std::vector<int>{graph->Find("scheme_rules"), graph->Find("bank_rules")}));  // `after:` order
  EXPECT_TRUE(graph->stage(graph->Find("bank_rules")).required);
  EXPECT_TRUE(graph->stage(graph->Find("scheme_rules")).required);
}

TEST_F(StageGraphTest, OptionalInputMayComeFromAConditionalStage) {
  // The claims shape: the decision takes the LLM's findings into account when there are some.
  Add(Stage("features", "claim_features"));
  Add(Stage("claims_model", "xgboost", {"features"}));
  Add(Stage("analysis", "llm_findings", {"claims_model"}, "claims_model.score >= 0.5"));
  Add(Stage("decision", "decision", {"claims_model", "analysis"}));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  const int decision = graph->Find("decision"), analysis = graph->Find("analysis");
  EXPECT_EQ(graph->InputStage(decision, kDecisionFindings), analysis);
  EXPECT_FALSE(graph->stage(analysis).required);
  RequestValues values(graph->size());
  values[0].ran = values[1].ran = true;  // features, claims_model; the analysis did not run
  EXPECT_TRUE(graph->ShouldRun(decision, values));
  // Without the analysis the optional input is simply unbound.
  declared_.erase(declared_.begin() + 2);
  declared_[2].after = {"claims_model"};
  auto without = Build();
  ASSERT_TRUE(without.ok()) << without.error().ToString();
  EXPECT_EQ(without->InputStage(without->Find("decision"), kDecisionFindings), -1);
}

TEST_F(StageGraphTest, StageRunsWhenItsUpstreamRanAndItsConditionHolds) {
  Add(Stage("features", "features"));
  Add(Stage("fraud", "xgboost", {"features"}));
  Add(Stage("decision", "decision", {"fraud"}));
  Add(Stage("forensic", "llm_findings", {"decision"}, "fraud.score >= 0.6"));
  auto graph = Build();
  ASSERT_TRUE(graph.ok()) << graph.error().ToString();
  const int forensic = graph->Find("forensic");
  RequestValues values(graph->size());
  for (StageOutputs& v : values) v.ran = true;
  values[static_cast<size_t>(graph->Find("fraud"))].score = 0.7;
  EXPECT_TRUE(graph->ShouldRun(forensic, values));
  values[static_cast<size_t>(graph->Find("fraud"))].score = 0.5;
  EXPECT_FALSE(graph->ShouldRun(forensic, values));
  values[static_cast<size_t>(graph->Find("fraud"))].score = 0.7;
  values[static_cast<size_t>(graph->Find("decision"))].ran = false;
  EXPECT_FALSE(graph->ShouldRun(forensic, values));
}

// A kind that is only its ports: enough for the registry and the graph.
class PortsOnlyKind : public StageKind {
 public:
  explicit PortsOnlyKind(StageKindSpec spec) : spec_(std::move(spec)) {}
  const StageKindSpec& spec() const override { return spec_; }
  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader&, const YAML::Node&,
                                                     const StageDeclaration&) const override {
    return Internal("not parsed in these tests");
  }
  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings&, const PrepareContext&) const override {
    return Internal("not prepared in these tests");
  }

 private:
  StageKindSpec spec_;
};

TEST(StageKindRegistry, KindsAreRegisteredOnce) {
  StageKindRegistry kinds;
  StageKindSpec source;
  source.kind = "source";
  source.outputs = {{"score", ValueType::kNumber}};
  ASSERT_TRUE(kinds.Register(std::make_unique<PortsOnlyKind>(source)).ok());
  source.outputs.clear();
  auto again = kinds.Register(std::make_unique<PortsOnlyKind>(source));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, "stage kind \"source\" is registered twice");
  EXPECT_EQ(kinds.Kinds(), std::vector<std::string>{"source"});
}

}  // namespace
}  // namespace txscore::pipelines
