#include "common/json_forms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace txscore {
namespace {

struct TestFindings {
  std::string risk_level;
  std::vector<std::string> flags;
  std::string summary;
  std::string model_id;
};

struct TestReason {
  std::string feature;
  double contribution = 0;
  double value = 0;
};

struct TestRuleHit {
  std::string rule;
  std::optional<std::string> decision;
};

TEST(FindingsToJson, WritesTheFourFieldsInOrder) {
  const TestFindings f{"high", {"amount_mismatch", "none"}, "Too much.", "tiny"};
  EXPECT_EQ(FindingsToJson<nlohmann::ordered_json>(f).dump(),
            R"({"risk_level":"high","flags":["amount_mismatch","none"],"summary":"Too much.","model_id":"tiny"})");
  EXPECT_EQ(FindingsToJson<nlohmann::json>(f).dump(),
            R"({"flags":["amount_mismatch","none"],"model_id":"tiny","risk_level":"high","summary":"Too much."})");
}

TEST(ReasonsToJson, WritesAMissingValueAsNull) {
  const std::vector<TestReason> reasons = {{"amount_ratio", 1.23456789, 0.5}, {"prior_claims", -0.5, std::nan("")}};
  EXPECT_EQ(ReasonsToJson<nlohmann::ordered_json>(reasons).dump(),
            R"([{"feature":"amount_ratio","contribution":1.23456789,"value":0.5},)"
            R"({"feature":"prior_claims","contribution":-0.5,"value":null}])");
  EXPECT_EQ(ReasonsToJson<nlohmann::json>(std::vector<TestReason>{}).dump(), "[]");
}

TEST(ReasonsToJson, RoundsContributionsToFourDigitsWhenAsked) {
  const std::vector<TestReason> reasons = {{"amount_ratio", 1.23456789, 2.0}};
  EXPECT_EQ(ReasonsToJson<nlohmann::json>(reasons, ContributionDigits::kFour).dump(),
            R"([{"contribution":1.2346,"feature":"amount_ratio","value":2.0}])");
}

TEST(RuleHitsToJson, WritesNullForAHitThatForcesNoDecision) {
  const std::vector<TestRuleHit> hits = {{"R1", "DECLINE"}, {"R2", std::nullopt}};
  auto decision_of = [](const TestRuleHit& hit) { return hit.decision ? hit.decision->c_str() : nullptr; };
  EXPECT_EQ(RuleHitsToJson<nlohmann::ordered_json>(hits, decision_of).dump(),
            R"([{"rule":"R1","decision":"DECLINE"},{"rule":"R2","decision":null}])");
}

}  // namespace
}  // namespace txscore
