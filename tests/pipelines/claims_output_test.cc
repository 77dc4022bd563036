#include "pipelines/claims_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

ClaimOutcome EveryPart() {
  ClaimOutcome o;
  o.claim_id = "CLM-1";
  o.score = 0.75;
  o.decision = Decision::kReview;
  o.reasons = {{"amount_ratio", 1.25, 0.5}, {"prior_claims", -0.5, std::nan("")}};
  o.rule_hits = {{"R1", Decision::kDecline}, {"R2", std::nullopt}};
  o.findings = llm::Findings{llm::RiskLevel::kHigh, {"amount_mismatch", "none"}, "Too much.", "tiny"};
  o.stage_scores = {{"claims_model", 0.75}};
  o.devices = {{"analysis", "cpu"}};
  o.llm_shortfalls = {{"analysis", StageReport::Outcome::kFailed, "boom"}};
  o.timings = {{"features", 12}, {"claims_model", 30}};
  return o;
}

TEST(OutcomeLine, WritesEveryPartInItsOrder) {
  EXPECT_EQ(OutcomeLine(7, EveryPart()),
            R"({"line":7,"claim_id":"CLM-1","score":0.75,"decision":"REVIEW",)"
            R"("reasons":[{"feature":"amount_ratio","contribution":1.25,"value":0.5},)"
            R"({"feature":"prior_claims","contribution":-0.5,"value":null}],)"
            R"("rule_hits":[{"rule":"R1","decision":"DECLINE"},{"rule":"R2","decision":null}],)"
            R"("findings":{"risk_level":"high","flags":["amount_mismatch","none"],"summary":"Too much.",)"
            R"("model_id":"tiny"},"stage_scores":{"claims_model":0.75},"devices":{"analysis":"cpu"},)"
            R"("llm_shortfalls":[{"stage":"analysis","reason":"failed","detail":"boom"}],)"
            R"("timings":{"features":12,"claims_model":30}})"
            "\n");
}

TEST(OutcomeLine, WritesNullFindingsAndEmptyPartsForAClaimWithoutThem) {
  ClaimOutcome o;
  o.claim_id = "CLM-2";
  o.score = 0.125;
  EXPECT_EQ(OutcomeLine(1, o),
            R"({"line":1,"claim_id":"CLM-2","score":0.125,"decision":"APPROVE","reasons":[],"rule_hits":[],)"
            R"("findings":null,"stage_scores":{},"devices":{},"llm_shortfalls":[],"timings":{}})"
            "\n");
}

TEST(ErrorLine, NamesTheFieldOnlyWhenTheErrorHasOne) {
  EXPECT_EQ(ErrorLine(8, InvalidArgument("amount_claimed must be a number", "amount_claimed")),
            R"({"line":8,"error":"amount_claimed must be a number","field":"amount_claimed"})"
            "\n");
  EXPECT_EQ(ErrorLine(9, InvalidArgument("the line is not valid JSON")),
            R"({"line":9,"error":"the line is not valid JSON"})"
            "\n");
}

TEST(ErrorLine, ReplacesInvalidUtf8) {
  EXPECT_EQ(ErrorLine(2, InvalidArgument("unknown key \"a\xFF\"", "a\xFF")),
            "{\"line\":2,\"error\":\"unknown key \\\"a\xEF\xBF\xBD\\\"\",\"field\":\"a\xEF\xBF\xBD\"}\n");
}

ClaimsJobSummary ASummary() {
  ClaimsJobSummary s;
  s.job_id = "j1";
  s.state = ClaimsJobState::kDone;
  s.total = 3;
  s.done = 3;
  s.errors = 1;
  s.llm_selected = 2;
  s.analysed = 1;
  s.llm_shortfalls = {{"failed", 1}};
  s.decisions = {{"APPROVE", 1}, {"REVIEW", 1}};
  s.flags = {{"a", 1}, {"b", 2}};
  s.stage_us = {{"claims_model", 1500000}, {"features", 250000}};
  s.devices = {{"claims_model", "cpu"}};
  s.elapsed_s = 2.0;
  s.runs = 1;
  s.pipeline_digests = {"sha256:0c", "sha256:0d"};
  s.input = "claims.jsonl";
  s.input_sha256 = "0a1b";
  s.shard = "2/3";
  return s;
}

constexpr char kSummaryJson[] = R"({
  "job_id": "j1",
  "state": "done",
  "total": 3,
  "done": 3,
  "errors": 1,
  "llm_selected": 2,
  "analysed": 1,
  "llm_shortfalls": {
    "failed": 1
  },
  "decisions": {
    "APPROVE": 1,
    "REVIEW": 1
  },
  "flags": [
    {
      "flag": "b",
      "claims": 2
    },
    {
      "flag": "a",
      "claims": 1
    }
  ],
  "stages": {
    "claims_model": {
      "seconds": 1.5,
      "device": "cpu"
    },
    "features": {
      "seconds": 0.25,
      "device": null
    }
  },
  "elapsed_s": 2.0,
  "claims_per_s": 1.5,
  "runs": 1,
  "pipeline_digests": [
    "sha256:0c",
    "sha256:0d"
  ],
  "input": "claims.jsonl",
  "input_sha256": "0a1b",
  "shard": "2/3"
})";

TEST(ClaimsJobSummary, ToJsonListsFlagsByCountAndStagesWithTheirDevices) {
  EXPECT_EQ(ASummary().ToJson(), kSummaryJson);
}

// A file named after a card number (a caller's choice) is named in the summary with the card cut.
TEST(ClaimsJobSummary, AnInputNamedAfterACardNumberIsNamedWithTheCardRedacted) {
  ClaimsJobSummary s = ASummary();
  s.input = "/in/4000 0012 3456 7899.jsonl";
  const std::string json = s.ToJson();
  EXPECT_NE(json.find(R"("input": "/in/[card number redacted].jsonl")"), std::string::npos) << json;
  EXPECT_EQ(json.find("0012 3456"), std::string::npos) << json;
}

TEST(ClaimsJobSummary, ToTextSaysWhatTheRunDid) {
  EXPECT_EQ(ASummary().ToText(),
            "job j1 done: 3 of 3 rows, 1 errors, 1.5 claims/s over 2.0 s (1 run)\n"
            "decisions: APPROVE 1 REVIEW 1\n"
            "LLM findings for 1 of 2 claims it was asked to read (no findings: failed 1; see \"llm_shortfalls\" in the "
            "output); most frequent flags: b 2 a 1\n"
            "time per stage: claims_model 1.50 s on cpu; features 0.25 s;\n"
            "pipeline files: sha256:0c, then sha256:0d\n");
}

TEST(ClaimsJobSummary, LlmShortfallShareIsZeroWhenTheLlmWasAskedForNothing) {
  ClaimsJobSummary s = ASummary();
  EXPECT_EQ(s.llm_shortfall_total(), 1);
  EXPECT_EQ(s.LlmShortfallShare(), 0.5);
  s.llm_selected = 0;
  s.llm_shortfalls.clear();
  EXPECT_EQ(s.LlmShortfallShare(), 0.0);
}

TEST(WriteSummaryFile, WritesTheSummaryJsonBesideTheOutput) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteSummaryFile(dir.file("out.jsonl"), ASummary()).ok());
  std::ifstream in(dir.file("out.jsonl.summary.json"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), std::string(kSummaryJson) + "\n");
}

}  // namespace
}  // namespace txscore::pipelines
