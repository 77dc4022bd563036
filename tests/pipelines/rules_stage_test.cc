#include "pipelines/stages/rules_stage.h"

#include <gtest/gtest.h>

#include <cmath>

#include "fraud/claim.h"
#include "fraud/claims_synthetic.h"
#include "fraud/features.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// A transactions pipeline whose decision reads a rules stage, written into a temp dir with the
// small test model; `rules_yaml` is the rules stage's own keys.
class RulesStageTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& rules_yaml) {
    return testing::WriteTestPipelineWithStages(
        dir_, testing::FraudModelStagesYaml() +
                  "  - name: rules\n"
                  "    kind: rules\n"
                  "    after: features\n" +
                  rules_yaml + "  - {name: decision, kind: decision, after: [fraud, rules]}\n");
  }
  Result<PipelineConfig> Load(const std::string& rules_yaml) { return LoadPipelineConfig(Write(rules_yaml)); }
  std::string Where(int line, int column) {
    return dir_.file("pipeline.yaml") + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  }
  // The rules stage of `rules_yaml`, prepared for transactions.
  std::unique_ptr<PreparedStage> Prepared(const std::string& rules_yaml) {
    Result<PipelineConfig> config = Load(rules_yaml);
    EXPECT_TRUE(config.ok()) << config.error().ToString();
    config_ = std::move(config).value();
    Result<std::unique_ptr<PreparedStage>> prepared =
        BuiltinStageKinds().Find("rules")->Prepare(*config_.FindSettings("rules"), {});
    EXPECT_TRUE(prepared.ok()) << prepared.error().ToString();
    return prepared.ok() ? std::move(prepared).value() : nullptr;
  }
  // The rules that match `tx` with these features.
  std::vector<std::string> Hits(const PreparedStage& stage, const fraud::Transaction& tx,
                                const fraud::FeatureVector& features, std::optional<Decision>* forced = nullptr) {
    RequestValues values(config_.graph.size());
    values[0].ran = true;
    values[0].features = features;
    StageOutputs out;
    StageReport report;
    EXPECT_TRUE(stage
                    .Run(StageInputs(config_.graph.stage(config_.graph.Find("rules")), values),
                         ScoredItem{&tx, nullptr, nullptr, 1, {}}, &out, &report)
                    .ok());
    if (forced) *forced = out.forced_decision;
    std::vector<std::string> ids;
    for (const RuleHit& hit : out.rule_hits) ids.push_back(hit.rule);
    return ids;
  }
  static fraud::Transaction Tx(double amount, const std::string& merchant = "m-1") {
    fraud::Transaction tx;
    tx.amount_minor = static_cast<int64_t>(std::llround(amount * 100));
    tx.currency = "USD";
    tx.merchant_id = merchant;
    tx.mcc = "5411";
    tx.card_token = std::string(64, 'a');
    return tx;
  }
  static fraud::FeatureVector Features(float velocity_count_1m) {
    fraud::FeatureVector f;
    f.fill(std::nanf(""));
    f[static_cast<size_t>(fraud::FeatureId::kVelocityCount1m)] = velocity_count_1m;
    return f;
  }

  testing::TempDir dir_;
  PipelineConfig config_;
};

TEST_F(RulesStageTest, ThresholdsOnFeaturesAndFieldsForceTheFirstMatchingRulesDecision) {
  auto stage = Prepared(
      "    rules:\n"
      "      - {id: N05, when: \"amount >= 2000\"}\n"
      "      - {id: R17, when: \"velocity_count_1m > 5 and amount > 500\", decision: DECLINE}\n"
      "      - {id: R30, when: \"amount > 100\", decision: REVIEW}\n");
  ASSERT_NE(stage, nullptr);
  std::optional<Decision> forced;
  EXPECT_EQ(Hits(*stage, Tx(600), Features(6), &forced), (std::vector<std::string>{"R17", "R30"}));
  EXPECT_EQ(forced, Decision::kDecline);  // the first that forces one
  EXPECT_EQ(Hits(*stage, Tx(600), Features(5), &forced), (std::vector<std::string>{"R30"}));  // 5 is not > 5
  EXPECT_EQ(forced, Decision::kReview);
  EXPECT_EQ(Hits(*stage, Tx(2500), Features(1), &forced), (std::vector<std::string>{"N05", "R30"}));
  EXPECT_EQ(forced, Decision::kReview);  // N05 only reports
  EXPECT_TRUE(Hits(*stage, Tx(50), Features(9), &forced).empty());
  EXPECT_EQ(forced, std::nullopt);
}

TEST_F(RulesStageTest, AMissingFeatureMatchesNoComparison) {
  auto stage = Prepared(
      "    rules:\n"
      "      - {id: A, when: \"velocity_count_1m > 5\"}\n"
      "      - {id: B, when: \"velocity_count_1m <= 5\"}\n"
      "      - {id: C, when: \"velocity_count_1m != 5\"}\n");
  ASSERT_NE(stage, nullptr);
  EXPECT_TRUE(Hits(*stage, Tx(1), Features(std::nanf(""))).empty());
  EXPECT_EQ(Hits(*stage, Tx(1), Features(5)), (std::vector<std::string>{"B"}));
}

TEST_F(RulesStageTest, AndBindsTighterThanOrAndParenthesesAndNotGroup) {
  auto stage = Prepared(
      "    rules:\n"
      "      - {id: P, when: \"amount > 100 or amount > 10 and merchant_id == 'm-x'\"}\n"
      "      - {id: Q, when: \"(amount > 100 or amount > 10) and merchant_id == 'm-x'\"}\n"
      "      - {id: N, when: \"not (amount > 10) and currency != \\\"EUR\\\"\"}\n");
  ASSERT_NE(stage, nullptr);
  EXPECT_EQ(Hits(*stage, Tx(200, "m-1"), Features(0)), (std::vector<std::string>{"P"}));
  EXPECT_EQ(Hits(*stage, Tx(50, "m-x"), Features(0)), (std::vector<std::string>{"P", "Q"}));
  EXPECT_EQ(Hits(*stage, Tx(50, "m-1"), Features(0)), (std::vector<std::string>{}));
  EXPECT_EQ(Hits(*stage, Tx(5, "m-1"), Features(0)), (std::vector<std::string>{"N"}));
}

TEST_F(RulesStageTest, ListsFromFilesAllowAndDenyWithCommentsAndBlankLinesSkipped) {
  testing::WriteFile(dir_.file("deny.txt"), "# merchants we never pay\n\n  m-bad  \nm-worse\n");
  testing::WriteFile(dir_.file("trusted.txt"), std::string(64, 'a') + "\n");
  auto stage = Prepared(
      "    lists: {deny_merchants: deny.txt, trusted_cards: trusted.txt}\n"
      "    rules:\n"
      "      - {id: A01, when: \"card_token in trusted_cards\", decision: APPROVE}\n"
      "      - {id: R20, when: \"merchant_id in deny_merchants\", decision: DECLINE}\n"
      "      - {id: N02, when: \"merchant_id not in deny_merchants\"}\n");
  ASSERT_NE(stage, nullptr);
  fraud::Transaction stranger = Tx(10, "m-bad");
  stranger.card_token = std::string(64, 'b');
  std::optional<Decision> forced;
  EXPECT_EQ(Hits(*stage, stranger, Features(0), &forced), (std::vector<std::string>{"R20"}));
  EXPECT_EQ(forced, Decision::kDecline);
  EXPECT_EQ(Hits(*stage, Tx(10, "m-worse"), Features(0), &forced), (std::vector<std::string>{"A01", "R20"}));
  EXPECT_EQ(forced, Decision::kApprove);              // the allow list comes first
  stranger.merchant_id = "# merchants we never pay";  // a comment is not an entry
  EXPECT_EQ(Hits(*stage, stranger, Features(0)), (std::vector<std::string>{"N02"}));
  stranger.merchant_id = "";  // nor is a blank line
  EXPECT_EQ(Hits(*stage, stranger, Features(0)), (std::vector<std::string>{"N02"}));
}

// Lists hold card tokens, whose hex holds a card-shaped digit run one time in 900
// (340998094460379 here): a token is judged as a caller's card_token is, and loads.
TEST_F(RulesStageTest, AListOfCardTokensLoadsThoughATokensHexHoldsACardShapedRun) {
  const std::string hex = "c0a024ba591a5cfb2aba085b4ea6071762e7934dc514bb340998094460379c4c";
  testing::WriteFile(dir_.file("cards.txt"), hex + "\nk2026_" + hex + "\n");
  auto config = Load(
      "    lists: {cards: cards.txt}\n"
      "    rules:\n"
      "      - {id: R1, when: \"card_token in cards\", decision: DECLINE}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto prepared = BuiltinStageKinds().Find("rules")->Prepare(*config->FindSettings("rules"), {});
  EXPECT_TRUE(prepared.ok()) << prepared.error().ToString();
}

TEST_F(RulesStageTest, AListEntryThatLooksLikeACardNumberIsRefusedWithItsLine) {
  testing::WriteFile(dir_.file("cards.txt"), "# cards\n4000 0012 3456 7899\n");
  auto config = Load(
      "    lists: {cards: cards.txt}\n"
      "    rules:\n"
      "      - {id: R1, when: \"card_token in cards\", decision: DECLINE}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_TRUE(testing::IsError(
      BuiltinStageKinds().Find("rules")->Prepare(*config->FindSettings("rules"), {}), ErrorCode::kInvalidArgument,
      dir_.file("cards.txt") + ":2: list cards: this entry looks like a card number; lists hold card "
                               "tokens (ScoreResult.card_token), never card numbers"));
}

TEST_F(RulesStageTest, MistakesInRulesAreReportedWithFileLineAndColumn) {
  const auto error = [&](const std::string& rules) {
    auto config = Load(rules);
    return config.ok() ? std::string("loaded") : config.error().message;
  };
  // The rules stage starts on line 23 of the file; its keys from line 26.
  const std::string rule = "    rules:\n      - {id: R1, when: ";
  EXPECT_EQ(error(rule + "\"velocity > 5\"}\n"),
            Where(11, 24) + "rule R1: when: \"velocity\" is neither a feature nor a field (at character 1)");
  EXPECT_EQ(error(rule + "\"merchant_id > 5\"}\n"),
            Where(11, 24) + "rule R1: when: merchant_id is text; compare it with a quoted string (at character 15)");
  EXPECT_EQ(error(rule + "\"amount == 'x'\"}\n"),
            Where(11, 24) + "rule R1: when: amount is a number; compare it with a number (at character 11)");
  EXPECT_EQ(error(rule + "\"merchant_id in nowhere\"}\n"),
            Where(11, 24) + "rule R1: when: no list named \"nowhere\" (lists: none) (at character 16)");
  EXPECT_EQ(error(rule + "\"amount > 5 and\"}\n"),
            Where(11, 24) + "rule R1: when: expected a condition, found the end (at character 15)");
  EXPECT_EQ(error(rule + "\"(amount > 5\"}\n"), Where(11, 24) + "rule R1: when: expected \")\" (at character 12)");
  EXPECT_EQ(error(rule + "\"mcc == '5411\"}\n"),
            Where(11, 24) + "rule R1: when: a quoted string is not closed (at character 8)");
  EXPECT_EQ(error(rule + "\"amount > 5 and provider_id == 'p'\"}\n"),
            Where(11, 24) +
                "rule R1: when: provider_id is a claim's and amount a transaction's; a rule reads one "
                "kind of item");
  EXPECT_EQ(error(rule + "\"amount > 5\", decision: BLOCK}\n"),
            Where(11, 48) + "decision must be APPROVE, REVIEW or DECLINE, not \"BLOCK\"");
  EXPECT_EQ(error(rule + "\"amount > 5\"}\n      - {id: R1, when: \"amount > 6\"}\n"),
            Where(12, 14) + "two rules have the id R1");
  EXPECT_EQ(error("    rules: []\n"), Where(10, 12) + "rules: must be a list of rules");
  EXPECT_EQ(error("    rule: []\n"),
            Where(10, 5) +
                "unknown key \"rule\" in stage rules (expected one of: after, inputs, kind, lists, name, "
                "rules, when)");
  EXPECT_EQ(error("    lists: {and: x.txt}\n" + rule + "\"amount > 5\"}\n"),
            Where(10, 13) + "lists: \"and\" is not a usable list name (letters, digits, _)");
  EXPECT_EQ(error("    lists: {deny: absent.txt}\n" + rule + "\"amount > 5\"}\n"),
            Where(10, 19) + "\"deny\": file " + dir_.file("absent.txt") + " does not exist");
}

TEST_F(RulesStageTest, AClaimsRuleInATransactionsPipelineIsRefusedWhenPrepared) {
  auto config = Load("    rules:\n      - {id: C1, when: \"amount_claimed > 5\"}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto db = storage::Database::Open(dir_.file("db"), {});
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE(testing::IsError(
      ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_)), ErrorCode::kInvalidArgument,
      Where(11, 24) + "rule C1: amount_claimed is a claim's; this pipeline scores transactions"));
}

TEST_F(RulesStageTest, AForcedDecisionAndItsReasonCodeReachTheResultAndTheAuditRecord) {
  testing::WriteFile(dir_.file("deny.txt"), "m-US-17\n");
  auto config = Load(
      "    lists: {deny_merchants: deny.txt}\n"
      "    rules:\n"
      "      - {id: N01, when: \"amount > 1\"}\n"
      "      - {id: R20, when: \"merchant_id in deny_merchants\", decision: DECLINE}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto db = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal});
  ASSERT_TRUE(db.ok());
  auto pipeline = ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();

  auto denied = (*pipeline)->Score(testing::ValidTransaction("req-1"));  // merchant m-US-17, 42.50 USD
  ASSERT_TRUE(denied.ok()) << denied.error().ToString();
  EXPECT_EQ(denied->decision, Decision::kDecline);
  EXPECT_LT(denied->score, 0.5);  // the model alone would have approved it
  ASSERT_EQ(denied->rule_hits.size(), 2u);
  EXPECT_EQ(denied->rule_hits[0].rule, "N01");
  EXPECT_EQ(denied->rule_hits[0].decision, std::nullopt);
  EXPECT_EQ(denied->rule_hits[1].rule, "R20");
  EXPECT_EQ(denied->rule_hits[1].decision, Decision::kDecline);
  auto audit = (*pipeline)->audit_log().ReadLast(1);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ((*audit)[0].decision, "DECLINE");
  ASSERT_EQ((*audit)[0].rule_hits.size(), 2u);
  EXPECT_EQ((*audit)[0].rule_hits[0].rule, "N01");
  EXPECT_EQ((*audit)[0].rule_hits[0].decision, "");
  EXPECT_EQ((*audit)[0].rule_hits[1].rule, "R20");
  EXPECT_EQ((*audit)[0].rule_hits[1].decision, "DECLINE");

  fraud::RawTransaction elsewhere = testing::ValidTransaction("req-2");
  elsewhere.merchant_id = "m-US-18";
  elsewhere.timestamp_ms += 60000;
  auto approved = (*pipeline)->Score(elsewhere);
  ASSERT_TRUE(approved.ok());
  EXPECT_EQ(approved->decision, Decision::kApprove);
  ASSERT_EQ(approved->rule_hits.size(), 1u);
  EXPECT_EQ(approved->rule_hits[0].rule, "N01");
}

TEST_F(RulesStageTest, TwoRulesStagesBothReachTheDecisionAndTheFirstForcedDecisionInAfterOrderWins) {
  testing::WriteTestPipelineWithStages(
      dir_, testing::FraudModelStagesYaml() +
                "  - {name: scheme, kind: rules, after: features, rules: [{id: S1, when: \"amount > 1\"}, "
                "{id: S2, when: \"amount > 2\", decision: REVIEW}]}\n"
                "  - {name: bank, kind: rules, after: features, rules: [{id: B1, when: \"amount > 3\", decision: "
                "DECLINE}]}\n"
                "  - {name: decision, kind: decision, after: [fraud, bank, scheme]}\n");
  auto config = LoadPipelineConfig(dir_.file("pipeline.yaml"));
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto db = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal});
  ASSERT_TRUE(db.ok());
  auto pipeline = ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  auto outcome = (*pipeline)->Score(testing::ValidTransaction("req-1"));  // 42.50 USD: every rule matches
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kDecline);  // bank comes first in the decision's after:
  std::vector<std::string> hits;
  for (const RuleHit& hit : outcome->rule_hits) hits.push_back(hit.rule);
  EXPECT_EQ(hits, (std::vector<std::string>{"B1", "S1", "S2"}));
}

TEST_F(RulesStageTest, RulesOnClaimFieldsForceDecisionsOnTheBatchPath) {
  testing::WriteTestPipeline(dir_);  // the card key
  fraud::SyntheticClaimsOptions data;
  data.claims = 12;
  data.seed = 5;
  std::vector<fraud::RawClaim> raw;
  for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) raw.push_back(c.claim);
  const std::string watched = raw[0].provider_id;
  const std::string water = "property_water";
  testing::WriteFile(dir_.file("providers.txt"), "# watched providers\n" + watched + "\n");
  testing::WriteFile(dir_.file("claims.yaml"),
                     "stages:\n" + testing::ClaimsModelStagesYaml() +
                         "  - name: rules\n"
                         "    kind: rules\n"
                         "    after: features\n"
                         "    lists: {watched: providers.txt}\n"
                         "    rules:\n"
                         "      - {id: P1, when: \"provider_id in watched\", decision: DECLINE}\n"
                         "      - {id: W1, when: \"claim_type == '" +
                         water +
                         "' and amount_claimed > 0\", decision: REVIEW}\n"
                         "      - {id: N1, when: \"prior_claims >= 0 and policy_limit > 0\"}\n"
                         "  - {name: decision, kind: decision, after: [claims_model, rules]}\n");
  auto config = LoadPipelineConfig(dir_.file("claims.yaml"));
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto claims = ClaimsPipeline::Create(*config, testing::TestCardKeyPath(dir_));
  ASSERT_TRUE(claims.ok()) << claims.error().ToString();
  std::vector<fraud::Claim> chunk;
  for (const fraud::RawClaim& r : raw) chunk.push_back(fraud::ValidateClaim(r, (*claims)->tokenizer()).value());
  auto outcomes = (*claims)->ScoreChunk(chunk, std::vector<int64_t>(chunk.size(), 1));
  ASSERT_TRUE(outcomes.ok()) << outcomes.error().ToString();
  int forced = 0;
  for (size_t i = 0; i < chunk.size(); ++i) {
    const fraud::Claim& c = chunk[i];
    const ClaimOutcome& o = (*outcomes)[i];
    const bool watched_provider = c.provider_id == watched;
    const bool water_claim = fraud::ClaimTypes()[static_cast<size_t>(c.claim_type)] == water;
    std::vector<std::string> expected;
    if (watched_provider) expected.push_back("P1");
    if (water_claim) expected.push_back("W1");
    expected.push_back("N1");
    std::vector<std::string> hits;
    for (const RuleHit& hit : o.rule_hits) hits.push_back(hit.rule);
    EXPECT_EQ(hits, expected) << c.claim_id;
    if (watched_provider) {
      EXPECT_EQ(o.decision, Decision::kDecline) << c.claim_id;
      ++forced;
    } else if (water_claim) {
      EXPECT_EQ(o.decision, Decision::kReview) << c.claim_id;
      ++forced;
    }
  }
  EXPECT_GE(forced, 1);  // the first claim's provider is watched
}

TEST_F(RulesStageTest, AForcedDeclineIsNeverSkippedForTheDeadlineHoweverShortTheBudget) {
  auto config = Load("    rules:\n      - {id: DENY_ALL, when: \"amount > 0\", decision: DECLINE}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_TRUE(config->graph.stage(config->graph.Find("rules")).required);
  auto db = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal});
  ASSERT_TRUE(db.ok());
  // Every reading of the clock is a second later: any stage that may be skipped for its
  // deadline is.
  PipelineRuntime runtime;
  auto now = std::make_shared<std::chrono::steady_clock::time_point>();
  runtime.clock = [now] { return *now += std::chrono::seconds(1); };
  auto pipeline = ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_), runtime);
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  fraud::RawTransaction hurried = testing::ValidTransaction("req-1");
  hurried.budget_ms = 1;
  auto outcome = (*pipeline)->Score(hurried);
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kDecline);
  EXPECT_TRUE(outcome->skipped_stages.empty());
  ASSERT_EQ(outcome->rule_hits.size(), 1u);
  EXPECT_EQ(outcome->rule_hits[0].rule, "DENY_ALL");
}

}  // namespace
}  // namespace txscore::pipelines
