#include "pipelines/condition.h"

#include <gtest/gtest.h>

#include "pipelines/decision.h"

namespace txscore::pipelines {
namespace {

const std::map<std::string, Condition::Output> kOutputs = {{"fraud.score", {ValueType::kNumber}},
                                                          {"decision.decision", {ValueType::kDecision}}};

TEST(Condition, ComparesScoresAndDecisions) {
  auto review = Condition::Parse("decision.decision == REVIEW", kOutputs);
  ASSERT_TRUE(review.ok()) << review.error().ToString();
  EXPECT_TRUE(review->Evaluate({0.7, Decision::kReview}));
  EXPECT_FALSE(review->Evaluate({0.7, Decision::kDecline}));
  auto high = Condition::Parse("fraud.score >= 0.6", kOutputs);
  ASSERT_TRUE(high.ok());
  EXPECT_TRUE(high->Evaluate({0.6, Decision::kApprove}));
  EXPECT_FALSE(high->Evaluate({0.59, Decision::kApprove}));
}

TEST(Condition, JoinsTermsLeftToRight) {
  auto c = Condition::Parse("fraud.score > 0.3 and decision.decision != DECLINE or fraud.score < 0.01", kOutputs);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->Evaluate({0.5, Decision::kReview}));    // (true and true) or false
  EXPECT_FALSE(c->Evaluate({0.5, Decision::kDecline}));  // (true and false) or false
  EXPECT_TRUE(c->Evaluate({0.005, Decision::kDecline})); // (false and false) or true
}

TEST(Condition, NamesWhatIsWrong) {
  auto message = [](const std::string& text) { return Condition::Parse(text, kOutputs).error().message; };
  EXPECT_EQ(message("frod.score >= 0.6"),
            "\"frod.score\" is not an output of an earlier stage (available: decision.decision, fraud.score)");
  EXPECT_EQ(message("fraud.score >= REVIEW"), "fraud.score is a number; \"REVIEW\" is not");
  EXPECT_EQ(message("decision.decision >= REVIEW"), "decision.decision is a decision: compare it with == or !=, not >=");
  EXPECT_EQ(message("decision.decision == MAYBE"),
            "decision.decision is a decision (APPROVE, REVIEW or DECLINE); \"MAYBE\" is not");
  EXPECT_EQ(message("fraud.score => 0.6"), "\"=>\" is not a comparison (==, !=, >=, >, <=, <)");
  EXPECT_EQ(message("fraud.score >= 0.6 but fraud.score < 0.9"), "expected \"and\" or \"or\", not \"but\"");
  EXPECT_EQ(message("fraud.score >= 0.6 and"), "expected STAGE.OUTPUT OP VALUE after \"and\"");
  EXPECT_EQ(message(""), "the condition is empty");
}

}  // namespace
}  // namespace txscore::pipelines
