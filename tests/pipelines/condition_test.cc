#include "pipelines/condition.h"

#include <gtest/gtest.h>

#include "pipelines/decision.h"

namespace txscore::pipelines {
namespace {

// Stage 0 is "fraud", stage 1 "decision".
const std::map<std::string, Condition::Output> kOutputs = {{"fraud.score", {ValueType::kNumber, 0}},
                                                           {"decision.decision", {ValueType::kDecision, 1}}};

RequestValues Values(double score, Decision decision) {
  RequestValues values(2);
  values[0].ran = values[1].ran = true;
  values[0].score = score;
  values[1].decision = decision;
  return values;
}

TEST(Condition, ComparesScoresAndDecisions) {
  auto review = Condition::Parse("decision.decision == REVIEW", kOutputs);
  ASSERT_TRUE(review.ok()) << review.error().ToString();
  EXPECT_TRUE(review->Evaluate(Values(0.7, Decision::kReview)));
  EXPECT_FALSE(review->Evaluate(Values(0.7, Decision::kDecline)));
  auto high = Condition::Parse("fraud.score >= 0.6", kOutputs);
  ASSERT_TRUE(high.ok());
  EXPECT_TRUE(high->Evaluate(Values(0.6, Decision::kApprove)));
  EXPECT_FALSE(high->Evaluate(Values(0.59, Decision::kApprove)));
}

TEST(Condition, JoinsTermsLeftToRight) {
  auto c = Condition::Parse("fraud.score > 0.3 and decision.decision != DECLINE or fraud.score < 0.01", kOutputs);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->Evaluate(Values(0.5, Decision::kReview)));     // (true and true) or false
  EXPECT_FALSE(c->Evaluate(Values(0.5, Decision::kDecline)));   // (true and false) or false
  EXPECT_TRUE(c->Evaluate(Values(0.005, Decision::kDecline)));  // (false and false) or true
}

TEST(Condition, TermOverAStageThatDidNotRunIsFalse) {
  auto c = Condition::Parse("fraud.score >= 0 or decision.decision != REVIEW", kOutputs);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  RequestValues values = Values(0.5, Decision::kApprove);
  EXPECT_TRUE(c->Evaluate(values));
  values[0].ran = values[1].ran = false;
  EXPECT_FALSE(c->Evaluate(values));
}

TEST(Condition, NamesWhatIsWrong) {
  auto message = [](const std::string& text) { return Condition::Parse(text, kOutputs).error().message; };
  EXPECT_EQ(message("frod.score >= 0.6"),
            "\"frod.score\" is not an output of an earlier stage (available: decision.decision, fraud.score)");
  EXPECT_EQ(message("fraud.score >= REVIEW"), "fraud.score is a number; \"REVIEW\" is not");
  EXPECT_EQ(message("decision.decision >= REVIEW"),
            "decision.decision is a decision: compare it with == or !=, not >=");
  EXPECT_EQ(message("decision.decision == MAYBE"),
            "decision.decision is a decision (APPROVE, REVIEW or DECLINE); \"MAYBE\" is not");
  EXPECT_EQ(message("fraud.score => 0.6"), "\"=>\" is not a comparison (==, !=, >=, >, <=, <)");
  EXPECT_EQ(message("fraud.score >= 0.6 but fraud.score < 0.9"), "expected \"and\" or \"or\", not \"but\"");
  EXPECT_EQ(message("fraud.score >= 0.6 and"), "expected STAGE.OUTPUT OP VALUE after \"and\"");
  EXPECT_EQ(message(""), "the condition is empty");
}

}  // namespace
}  // namespace txscore::pipelines
