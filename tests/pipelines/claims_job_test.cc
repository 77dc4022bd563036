#include "pipelines/claims_job.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fraud/claims_synthetic.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// Claims jobs without an LLM stage (this test binary links no libtorch; the LLM path and
// SIGKILL resume are covered by tests/integration/batch_resume_test.py with the real binary).
class ClaimsJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.file("card.key"), testing::TestCardKey());
    ::chmod(dir_.file("card.key").c_str(), 0600);
    testing::WriteFile(dir_.file("claims.yaml"),
                       "stages:\n" + testing::ClaimsModelStagesYaml() +
                           "  - {name: decision, kind: decision, after: claims_model, review_threshold: 0.3}\n");
    auto config = LoadPipelineConfig(dir_.file("claims.yaml"));
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    auto pipeline = ClaimsPipeline::Create(*config, dir_.file("card.key"));
    ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
    pipeline_ = std::move(pipeline).value();
    db_ = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal}).value();
    fraud::SyntheticClaimsOptions data;
    data.claims = 50;
    data.seed = 5;
    std::ofstream out(dir_.file("claims.jsonl"));
    for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) out << fraud::ClaimToJson(c.claim) << "\n";
  }

  ClaimsJobOptions Options(const std::string& output = "out.jsonl") {
    ClaimsJobOptions options;
    options.input_path = dir_.file("claims.jsonl");
    options.output_path = dir_.file(output);
    options.chunk_size = 8;
    return options;
  }

  // The job of Options() run until it has done its first chunk (8 rows), then interrupted as a
  // stopping server interrupts it; the result of that run.
  Result<ClaimsJobSummary> RunFirstChunkThenInterrupt(ClaimsPipeline& pipeline) {
    std::atomic<bool> interrupt{false};
    ClaimsJobOptions options = Options();
    options.interrupt = &interrupt;
    options.progress = [&](const ClaimsJobProgress& p) { interrupt.store(p.done >= 8); };
    return RunClaimsJob(pipeline, *db_, options);
  }

  // A job over bad.jsonl: the 50 good claims, then `csv_lines` lines of CSV (a file in the
  // wrong format), with an error share of 0.1; output bad.out.jsonl.
  ClaimsJobOptions GoodRowsThenCsvJob(int csv_lines, int chunk_size) {
    {
      std::ofstream out(dir_.file("bad.jsonl"));
      out << testing::ReadFile(dir_.file("claims.jsonl"));
      for (int i = 0; i < csv_lines; ++i) out << "claim_id,policy_id,claimant_id\n";
    }
    ClaimsJobOptions options = Options("bad.out.jsonl");
    options.input_path = dir_.file("bad.jsonl");
    options.chunk_size = chunk_size;
    options.max_error_share = 0.1;
    return options;
  }

  // The output's lines without their timings (which differ from run to run).
  std::vector<std::string> LinesWithoutTimings(const std::string& output) {
    std::vector<std::string> lines;
    std::ifstream in(dir_.file(output));
    for (std::string line; std::getline(in, line);) {
      nlohmann::json doc = nlohmann::json::parse(line);
      doc.erase("timings");
      lines.push_back(doc.dump());
    }
    return lines;
  }

  testing::TempDir dir_;
  std::unique_ptr<ClaimsPipeline> pipeline_;
  std::unique_ptr<storage::Database> db_;
};

TEST(ClaimsShard, ParsesItsFormsAndSelectsEachRowForExactlyOneShard) {
  EXPECT_EQ(ClaimsShard::Parse("2/3")->Name(), "2/3");
  EXPECT_EQ(ClaimsShard::Parse("0/2:contiguous")->Name(), "0/2:contiguous");
  EXPECT_EQ(ClaimsShard{}.Name(), "");  // the whole input
  for (const std::string bad : {"3/3", "-1/3", "1/0", "1", "a/b", "1/3:ranges", "1/3/4", ""}) {
    EXPECT_TRUE(
        testing::IsError(ClaimsShard::Parse(bad), ErrorCode::kInvalidArgument,
                         "--shard takes I/N with 0 <= I < N (e.g. 0/3), or I/N:contiguous; not \"" + bad + "\""))
        << bad;
  }
  // 61 rows: each in exactly one shard, for both splits; round robin 21/20/20, ranges 20/20/21.
  for (bool contiguous : {false, true}) {
    std::vector<int> shard_of(61, -1), sizes(3, 0);
    for (int i = 0; i < 3; ++i) {
      const ClaimsShard shard{i, 3, contiguous};
      for (int64_t r = 0; r < 61; ++r) {
        if (!shard.Selects(r, 61)) continue;
        EXPECT_EQ(shard_of[static_cast<size_t>(r)], -1) << r;
        shard_of[static_cast<size_t>(r)] = i;
        ++sizes[static_cast<size_t>(i)];
      }
    }
    EXPECT_EQ(std::count(shard_of.begin(), shard_of.end(), -1), 0);
    EXPECT_EQ(sizes, contiguous ? (std::vector<int>{20, 20, 21}) : (std::vector<int>{21, 20, 20}));
    if (contiguous) EXPECT_EQ(shard_of[19], 0);
    if (contiguous) EXPECT_EQ(shard_of[20], 1);
  }
  // A shard is a job of its own.
  EXPECT_NE(ClaimsJobId("/in", "/out", {}, "0/2"), ClaimsJobId("/in", "/out"));
  EXPECT_NE(ClaimsJobId("/in", "/out", {}, "0/2"), ClaimsJobId("/in", "/out", {}, "0/2:contiguous"));
}

TEST_F(ClaimsJobTest, ScoresEveryRowInInputOrderAndWritesASummary) {
  auto summary = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->state, ClaimsJobState::kDone);
  EXPECT_EQ(summary->total, 50);
  EXPECT_EQ(summary->done, 50);
  EXPECT_EQ(summary->errors, 0);
  EXPECT_EQ(summary->runs, 1);
  int64_t decided = 0;
  for (const auto& [decision, count] : summary->decisions) decided += count;
  EXPECT_EQ(decided, 50);
  EXPECT_EQ(summary->devices.at("claims_model"), "cpu");
  EXPECT_GT(summary->stage_us.count("claims_model"), 0u);

  std::ifstream input(dir_.file("claims.jsonl"));
  std::ifstream output(dir_.file("out.jsonl"));
  std::string in_line, out_line;
  int64_t line = 0;
  while (std::getline(input, in_line)) {
    ++line;
    ASSERT_TRUE(std::getline(output, out_line)) << "no output for line " << line;
    const nlohmann::json claim = nlohmann::json::parse(in_line), result = nlohmann::json::parse(out_line);
    EXPECT_EQ(result.at("line"), line);
    EXPECT_EQ(result.at("claim_id"), claim.at("claim_id"));
    EXPECT_EQ(result.at("stage_scores").at("claims_model"), result.at("score"));
    EXPECT_TRUE(result.at("findings").is_null());
    EXPECT_TRUE(result.at("timings").contains("claims_model"));
  }
  EXPECT_FALSE(std::getline(output, out_line));
  const nlohmann::json saved = nlohmann::json::parse(testing::ReadFile(dir_.file("out.jsonl.summary.json")));
  EXPECT_EQ(saved.at("done"), 50);
  EXPECT_EQ(saved.at("state"), "done");
}

// The job's outputs for `output`, by claim: decision and score (line numbers and timings
// depend on the file).
std::map<std::string, std::string> ResultsByClaim(const std::string& output) {
  std::map<std::string, std::string> results;
  std::ifstream in(output);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json doc = nlohmann::json::parse(line);
    results[doc.at("claim_id").get<std::string>()] = doc.at("decision").dump() + " " + doc.at("score").dump();
  }
  return results;
}

void WriteClaims(const std::string& path, const std::vector<fraud::LabeledClaim>& claims, size_t from, size_t to) {
  std::ofstream out(path);
  for (size_t i = from; i < to; ++i) out << fraud::ClaimToJson(claims[i].claim) << "\n";
}

TEST_F(ClaimsJobTest, AClaimScoresTheSameInAFileOf100AndOf30000) {
  fraud::SyntheticClaimsOptions data;
  data.claims = 30000;
  data.seed = 11;
  const std::vector<fraud::LabeledClaim> claims = fraud::GenerateClaims(data);
  WriteClaims(dir_.file("large.jsonl"), claims, 0, claims.size());
  WriteClaims(dir_.file("small.jsonl"), claims, 0, 100);  // the first 100 by report date
  auto job = [&](storage::Database& db, const std::string& input, const std::string& output) {
    ClaimsJobOptions options = Options(output);
    options.input_path = dir_.file(input);
    options.chunk_size = 1000;
    auto summary = RunClaimsJob(*pipeline_, db, options);
    ASSERT_TRUE(summary.ok()) << summary.error().ToString();
    ASSERT_EQ(summary->errors, 0);
  };
  job(*db_, "small.jsonl", "small.out.jsonl");
  auto other_db = storage::Database::Open(dir_.file("db2"), {.durability = storage::Durability::kWal}).value();
  job(*other_db, "large.jsonl", "large.out.jsonl");
  // And the small file again in a database that has seen the large one: its later claims
  // change nothing before them.
  job(*other_db, "small.jsonl", "small.again.jsonl");

  const std::map<std::string, std::string> small = ResultsByClaim(dir_.file("small.out.jsonl"));
  const std::map<std::string, std::string> large = ResultsByClaim(dir_.file("large.out.jsonl"));
  ASSERT_EQ(small.size(), 100u);
  ASSERT_EQ(large.size(), 30000u);
  for (const auto& [claim_id, result] : small) EXPECT_EQ(large.at(claim_id), result) << claim_id;
  EXPECT_EQ(ResultsByClaim(dir_.file("small.again.jsonl")), small);
}

TEST_F(ClaimsJobTest, AProvidersHistoryCarriesToTheNextFileAndCountsEachClaimOnce) {
  fraud::SyntheticClaimsOptions data;
  data.claims = 2000;
  data.seed = 12;
  const std::vector<fraud::LabeledClaim> claims = fraud::GenerateClaims(data);
  WriteClaims(dir_.file("whole.jsonl"), claims, 0, claims.size());
  WriteClaims(dir_.file("first.jsonl"), claims, 0, 1000);
  WriteClaims(dir_.file("second.jsonl"), claims, 1000, claims.size());
  auto job = [&](storage::Database& db, const std::string& input, bool restart = false) {
    ClaimsJobOptions options = Options(input + ".out");
    options.input_path = dir_.file(input);
    options.chunk_size = 500;
    options.restart = restart;
    auto summary = RunClaimsJob(*pipeline_, db, options);
    ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  };
  const std::string provider = claims[1500].claim.provider_id;
  auto claims_of_provider = [&](size_t to) {
    return std::count_if(claims.begin(), claims.begin() + static_cast<std::ptrdiff_t>(to),
                         [&](const fraud::LabeledClaim& c) { return c.claim.provider_id == provider; });
  };
  job(*db_, "first.jsonl");
  EXPECT_EQ(ReadProviderHistory(*db_, provider)->size(), static_cast<size_t>(claims_of_provider(1000)));
  job(*db_, "first.jsonl", /*restart=*/true);  // scored again: nothing is counted twice
  EXPECT_EQ(ReadProviderHistory(*db_, provider)->size(), static_cast<size_t>(claims_of_provider(1000)));
  job(*db_, "second.jsonl");
  EXPECT_EQ(ReadProviderHistory(*db_, provider)->size(), static_cast<size_t>(claims_of_provider(2000)));

  // The second file after the first scores as it does inside the whole file...
  auto whole_db = storage::Database::Open(dir_.file("db2"), {.durability = storage::Durability::kWal}).value();
  job(*whole_db, "whole.jsonl");
  const std::map<std::string, std::string> second = ResultsByClaim(dir_.file("second.jsonl.out"));
  const std::map<std::string, std::string> whole = ResultsByClaim(dir_.file("whole.jsonl.out"));
  for (const auto& [claim_id, result] : second) EXPECT_EQ(whole.at(claim_id), result) << claim_id;
  // ...and not as it does alone, where its providers have no history.
  auto fresh_db = storage::Database::Open(dir_.file("db3"), {.durability = storage::Durability::kWal}).value();
  job(*fresh_db, "second.jsonl", /*restart=*/true);
  EXPECT_NE(ResultsByClaim(dir_.file("second.jsonl.out")), second);
}

TEST_F(ClaimsJobTest, ADamagedProviderHistoryFailsTheJobWithoutWritingAnOutput) {
  const std::string provider = fraud::GenerateClaims({.seed = 5, .claims = 50})[0].claim.provider_id;
  storage::WriteBatch damage;
  damage.Put(storage::ColumnFamily::kJobs, "claims-provider/" + provider, "not a history");
  ASSERT_TRUE(db_->Write(damage).ok());
  auto summary = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(summary.error().message.find("provider " + provider), std::string::npos) << summary.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("out.jsonl")));
}

TEST_F(ClaimsJobTest, AJobOverItsErrorShareInItsOnlyChunkFailsInsteadOfEndingDone) {
  // One chunk: the check comes after the job's last rows.
  ClaimsJobOptions options = GoodRowsThenCsvJob(/*csv_lines=*/1150, /*chunk_size=*/5000);
  auto stopped = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().field, "max_error_share");
  EXPECT_EQ(stopped.error().message.rfind("stopped after 1200 of 1200 rows: 1150 (95.8 %) are errors", 0), 0u)
      << stopped.error().message;
}

TEST_F(ClaimsJobTest, AJobOverItsErrorShareStopsAfterTheCheckRows) {
  ClaimsJobOptions options = GoodRowsThenCsvJob(/*csv_lines=*/2450, /*chunk_size=*/250);
  auto stopped = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(stopped.error().field, "max_error_share");
  EXPECT_EQ(stopped.error().message.rfind("stopped after 1000 of 2500 rows: 950 (95.0 %) are errors, over the "
                                          "maximum error share 0.1; the reasons are in " +
                                              std::filesystem::absolute(dir_.file("bad.out.jsonl")).string(),
                                          0),
            0u)
      << stopped.error().message;
  // What was done is kept: 1,000 lines, and a record that says FAILED and why.
  EXPECT_EQ(LinesWithoutTimings("bad.out.jsonl").size(), 1000u);
  auto record = ReadClaimsJob(*db_, ClaimsJobId(std::filesystem::absolute(dir_.file("bad.jsonl")).string(),
                                                std::filesystem::absolute(dir_.file("bad.out.jsonl")).string()));
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, ClaimsJobState::kFailed);
  EXPECT_EQ((*record)->done, 1000);
  EXPECT_EQ((*record)->error, stopped.error().message);

  // The default share (1) never stops a job; nor does a share the errors stay under.
  options.output_path = dir_.file("all.out.jsonl");
  options.max_error_share = 1.0;
  auto whole = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(whole.ok()) << whole.error().ToString();
  EXPECT_EQ(whole->done, 2500);
  EXPECT_EQ(whole->errors, 2450);
}

TEST_F(ClaimsJobTest, AFileOfFewerRowsThanTheCheckRunsToTheEndWhateverItsErrors) {
  {
    std::ofstream out(dir_.file("bad.jsonl"));
    for (int i = 0; i < 999; ++i) out << "not a claim\n";
  }
  ClaimsJobOptions options = Options("bad.out.jsonl");
  options.input_path = dir_.file("bad.jsonl");
  options.chunk_size = 100;
  options.max_error_share = 0.0;
  auto summary = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->state, ClaimsJobState::kDone);
  EXPECT_EQ(summary->errors, 999);
  EXPECT_EQ(BatchRunExitCode(*summary, 0.1, 0.1), 3);  // and `batch run` says so by its exit code
}

TEST_F(ClaimsJobTest, BadRowsBecomeErrorLinesAndTheJobGoesOn) {
  const std::string good =
      testing::ReadFile(dir_.file("claims.jsonl")).substr(0, testing::ReadFile(dir_.file("claims.jsonl")).find('\n'));
  auto with = [&](const std::string& key, const std::string& value) {
    nlohmann::json doc = nlohmann::json::parse(good);
    doc[key] = nlohmann::json::parse(value);
    return doc.dump();
  };
  nlohmann::json missing = nlohmann::json::parse(good);
  missing.erase("policy_limit");
  testing::WriteFile(dir_.file("claims.jsonl"), good + "\n" + "{\"claim_id\": \"x\",\n" + "\n" + missing.dump() + "\n" +
                                                    with("amount_claimed", "\"12.50\"") + "\n" +
                                                    with("incident_date", "\"2026-02-30\"") + "\n" +
                                                    with("report_date", "\"2025-01-01\"") + "\n" + good + "\n");
  auto summary = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->total, 7);  // the blank line is not a row
  EXPECT_EQ(summary->errors, 5);
  std::vector<nlohmann::json> lines;
  std::ifstream output(dir_.file("out.jsonl"));
  for (std::string line; std::getline(output, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_TRUE(lines[0].contains("score"));
  EXPECT_EQ(lines[1], nlohmann::json::parse(R"({"line": 2, "error": "the line is not valid JSON"})"));
  EXPECT_EQ(lines[2], nlohmann::json::parse(
                          R"({"line": 4, "error": "missing required key \"policy_limit\"", "field": "policy_limit"})"));
  EXPECT_EQ(lines[3], nlohmann::json::parse(
                          R"({"line": 5, "error": "amount_claimed must be a number", "field": "amount_claimed"})"));
  EXPECT_EQ(lines[4].at("line"), 6);
  EXPECT_EQ(lines[4].at("error"), "incident_date: \"2026-02-30\" is not a calendar date");
  EXPECT_EQ(lines[5].at("field"), "report_date");
  EXPECT_EQ(lines[6].at("line"), 8);
  EXPECT_TRUE(lines[6].contains("score"));
}

TEST_F(ClaimsJobTest, ResumesExactlyOnceAfterACrashBetweenWritingAndRecordingAChunk) {
  auto reference = RunClaimsJob(*pipeline_, *db_, Options("reference.jsonl"));
  ASSERT_TRUE(reference.ok()) << reference.error().ToString();

  // Stop after two chunks, as a Ctrl-C would...
  std::atomic<bool> cancel{false};
  ClaimsJobOptions options = Options();
  options.cancel = &cancel;
  options.progress = [&](const ClaimsJobProgress& p) { cancel.store(p.done >= 16); };
  auto first = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->state, ClaimsJobState::kCancelled);
  EXPECT_EQ(first->done, 16);
  // ...then leave what a crash between appending a chunk and recording it leaves: lines the
  // job's record does not cover, and half a line.
  {
    std::ofstream out(dir_.file("out.jsonl"), std::ios::app);
    out << "{\"line\": 17, \"claim_id\": \"written but never recorded\"}\n{\"line\": 18, \"clai";
  }
  options.progress = nullptr;
  options.cancel = nullptr;
  auto resumed = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(resumed.ok()) << resumed.error().ToString();
  EXPECT_EQ(resumed->state, ClaimsJobState::kDone);
  EXPECT_EQ(resumed->runs, 2);
  EXPECT_EQ(resumed->done, 50);
  EXPECT_EQ(resumed->decisions, reference->decisions);  // the totals span both runs
  EXPECT_EQ(LinesWithoutTimings("out.jsonl"), LinesWithoutTimings("reference.jsonl"));
}

TEST_F(ClaimsJobTest, AnInterruptedJobIsRecordedAsInterruptedAndResumes) {
  // What a stopping server does: interrupt after the chunk in flight. Unlike a cancel, the
  // record says "interrupted", which is how a server finds the job again when it starts.
  auto first = RunFirstChunkThenInterrupt(*pipeline_);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->state, ClaimsJobState::kInterrupted);
  EXPECT_EQ(first->done, 8);
  const std::string id = ClaimsJobId(dir_.file("claims.jsonl"), dir_.file("out.jsonl"));
  auto jobs = ListClaimsJobs(*db_);
  ASSERT_TRUE(jobs.ok()) << jobs.error().ToString();
  ASSERT_EQ(jobs->count(id), 1u);
  EXPECT_EQ(jobs->at(id).state, ClaimsJobState::kInterrupted);
  EXPECT_EQ(jobs->at(id).done, 8);
  EXPECT_EQ(jobs->at(id).input, dir_.file("claims.jsonl"));

  auto resumed = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_TRUE(resumed.ok()) << resumed.error().ToString();
  EXPECT_EQ(resumed->state, ClaimsJobState::kDone);
  EXPECT_EQ(resumed->runs, 2);
  ASSERT_TRUE(RunClaimsJob(*pipeline_, *db_, Options("reference.jsonl")).ok());
  EXPECT_EQ(LinesWithoutTimings("out.jsonl"), LinesWithoutTimings("reference.jsonl"));
  EXPECT_EQ(ListClaimsJobs(*db_)->at(id).state, ClaimsJobState::kDone);
}

// The summary names what decided the rows: one pipeline, or each in turn when the job was
// resumed after its pipeline's files changed.
TEST_F(ClaimsJobTest, AJobResumedAfterItsPipelineChangedNamesBothPipelineDigests) {
  auto first = RunFirstChunkThenInterrupt(*pipeline_);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  ASSERT_EQ(first->state, ClaimsJobState::kInterrupted);
  EXPECT_EQ(first->pipeline_digests, std::vector<std::string>{pipeline_->bundle_digest()});
  // Another review threshold: another pipeline file, another digest.
  testing::WriteFile(dir_.file("claims.yaml"),
                     "stages:\n" + testing::ClaimsModelStagesYaml() +
                         "  - {name: decision, kind: decision, after: claims_model, review_threshold: 0.4}\n");
  auto changed = ClaimsPipeline::Create(LoadPipelineConfig(dir_.file("claims.yaml")).value(), dir_.file("card.key"));
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  ASSERT_NE((*changed)->bundle_digest(), pipeline_->bundle_digest());
  auto resumed = RunClaimsJob(**changed, *db_, Options());
  ASSERT_TRUE(resumed.ok()) << resumed.error().ToString();
  EXPECT_EQ(resumed->state, ClaimsJobState::kDone);
  EXPECT_EQ(resumed->pipeline_digests,
            (std::vector<std::string>{pipeline_->bundle_digest(), (*changed)->bundle_digest()}));
  const nlohmann::json summary = nlohmann::json::parse(testing::ReadFile(dir_.file("out.jsonl.summary.json")));
  EXPECT_EQ(summary["pipeline_digests"],
            nlohmann::json::array({pipeline_->bundle_digest(), (*changed)->bundle_digest()}));
}

TEST_F(ClaimsJobTest, RefusesToResumeWhenTheInputChanged) {
  std::atomic<bool> cancel{false};
  ClaimsJobOptions options = Options();
  options.cancel = &cancel;
  options.progress = [&](const ClaimsJobProgress& p) {
    if (p.done > 0) cancel = true;  // stop after the first chunk: the job has begun
  };
  auto begun = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(begun.ok());
  ASSERT_EQ(begun->done, 8);
  options.progress = nullptr;
  std::ofstream(dir_.file("claims.jsonl"), std::ios::app) << "\n";
  options.cancel = nullptr;
  auto changed = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.error().code, ErrorCode::kFailedPrecondition);
  const std::string id = ClaimsJobId(dir_.file("claims.jsonl"), dir_.file("out.jsonl"));
  EXPECT_NE(changed.error().message.find("has changed since job " + id), std::string::npos) << changed.error().message;
  EXPECT_EQ(changed.error().field, "input");
  // The record says the job failed, and why; its progress stays for a resume.
  auto record = ReadClaimsJob(*db_, id);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, ClaimsJobState::kFailed);
  EXPECT_EQ((*record)->error, changed.error().message);
  EXPECT_EQ((*record)->done, 8);
  options.restart = true;  // the way out the message names
  auto restarted = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  EXPECT_EQ(restarted->done, 50);
  EXPECT_EQ(restarted->runs, 1);
}

TEST_F(ClaimsJobTest, RefusesToOverwriteAnOutputItDidNotWrite) {
  testing::WriteFile(dir_.file("out.jsonl"), "precious\n");
  auto refused = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(testing::ReadFile(dir_.file("out.jsonl")), "precious\n");
}

TEST_F(ClaimsJobTest, AFinishedJobRunAgainScoresNothing) {
  ASSERT_TRUE(RunClaimsJob(*pipeline_, *db_, Options()).ok());
  const std::string output = testing::ReadFile(dir_.file("out.jsonl"));
  auto again = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(again->state, ClaimsJobState::kDone);
  EXPECT_EQ(again->runs, 1);
  EXPECT_EQ(testing::ReadFile(dir_.file("out.jsonl")), output);
}

TEST_F(ClaimsJobTest, CsvInputGivesTheSameResultsAsJsonLines) {
  std::ofstream csv(dir_.file("claims.csv"));
  csv << "claim_id,policy_id,claimant_id,incident_date,report_date,claim_type,amount_claimed,policy_limit,prior_claims,"
         "provider_id,narrative,adjuster_notes\n";
  std::ifstream input(dir_.file("claims.jsonl"));
  for (std::string line; std::getline(input, line);) {
    const nlohmann::json c = nlohmann::json::parse(line);
    auto quoted = [](std::string text) {
      for (size_t at = text.find('"'); at != std::string::npos; at = text.find('"', at + 2)) text.insert(at, "\"");
      return "\"" + text + "\"";
    };
    csv << c["claim_id"].get<std::string>() << "," << c["policy_id"].get<std::string>() << ","
        << c["claimant_id"].get<std::string>() << "," << c["incident_date"].get<std::string>() << ","
        << c["report_date"].get<std::string>() << "," << c["claim_type"].get<std::string>() << ","
        << c["amount_claimed"].dump() << "," << c["policy_limit"].dump() << "," << c["prior_claims"].dump() << ","
        << c["provider_id"].get<std::string>() << "," << quoted(c["narrative"].get<std::string>() + "\nsecond line")
        << "," << quoted(c["adjuster_notes"].get<std::string>()) << "\n";
  }
  csv.close();
  // The same narratives as the CSV's, second line included.
  {
    std::ifstream in(dir_.file("claims.jsonl"));
    std::ofstream out(dir_.file("claims2.jsonl"));
    for (std::string line; std::getline(in, line);) {
      nlohmann::json c = nlohmann::json::parse(line);
      c["narrative"] = c["narrative"].get<std::string>() + "\nsecond line";
      out << c.dump() << "\n";
    }
  }
  ClaimsJobOptions from_csv = Options("csv.jsonl");
  from_csv.input_path = dir_.file("claims.csv");
  ClaimsJobOptions from_json = Options("json.jsonl");
  from_json.input_path = dir_.file("claims2.jsonl");
  ASSERT_TRUE(RunClaimsJob(*pipeline_, *db_, from_csv).ok());
  ASSERT_TRUE(RunClaimsJob(*pipeline_, *db_, from_json).ok());
  std::vector<std::string> a = LinesWithoutTimings("csv.jsonl"), b = LinesWithoutTimings("json.jsonl");
  ASSERT_EQ(a.size(), 50u);
  ASSERT_EQ(b.size(), 50u);
  for (size_t i = 0; i < a.size(); ++i) {
    nlohmann::json x = nlohmann::json::parse(a[i]), y = nlohmann::json::parse(b[i]);
    EXPECT_EQ(x.at("line"), 2 + 2 * static_cast<int>(i));  // a header line, and two lines per record
    EXPECT_EQ(y.at("line"), 1 + static_cast<int>(i));
    x.erase("line");
    y.erase("line");
    EXPECT_EQ(x, y);
  }
}

}  // namespace
}  // namespace txscore::pipelines

namespace txscore::pipelines {
namespace {

constexpr char kCsvHeader[] =
    "claim_id,policy_id,claimant_id,incident_date,report_date,claim_type,amount_claimed,policy_limit,prior_claims,"
    "provider_id,narrative,adjuster_notes\n";
constexpr char kCsvRow[] = "CLM-9,POL-9,C-9,2026-02-01,2026-02-03,burglary,900.00,10000.00,0,P-9,\"A door forced.\",\n";

TEST_F(ClaimsJobTest, ACsvRecordOverTheRowLimitIsAnErrorRowAndTheNextRowIsScored) {
  // One quoted field holding 1.1 million newlines: re-splitting the record at every line took
  // quadratic time (1 MB: about 280 s); read once, the over-long row is an error row.
  std::ofstream csv(dir_.file("newlines.csv"), std::ios::binary);
  csv << kCsvHeader << "CLM-1,POL-1,C-1,2026-02-01,2026-02-03,burglary,900.00,10000.00,0,P-1,\""
      << std::string(1100000, '\n') << "\",\n"
      << kCsvRow;
  csv.close();
  ClaimsJobOptions options = Options("newlines.out.jsonl");
  options.input_path = dir_.file("newlines.csv");
  auto summary = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->total, 2);
  EXPECT_EQ(summary->errors, 1);
  std::ifstream out(dir_.file("newlines.out.jsonl"));
  std::string first, second;
  std::getline(out, first);
  std::getline(out, second);
  EXPECT_EQ(nlohmann::json::parse(first).at("error"),
            "the row is longer than 1048576 bytes (in a CSV file: is a quote left open?)");
  EXPECT_EQ(nlohmann::json::parse(first).at("line"), 2);
  EXPECT_EQ(nlohmann::json::parse(second).at("claim_id"), "CLM-9");
  EXPECT_EQ(nlohmann::json::parse(second).at("line"), 1100003);
}

TEST_F(ClaimsJobTest, AByteOrderMarkBeforeTheCsvHeaderIsIgnored) {
  testing::WriteFile(dir_.file("bom.csv"), std::string("\xEF\xBB\xBF") + kCsvHeader + kCsvRow);
  ClaimsJobOptions options = Options("bom.out.jsonl");
  options.input_path = dir_.file("bom.csv");
  auto summary = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();  // the header's first column was "\xEF\xBB\xBFclaim_id"
  EXPECT_EQ(summary->errors, 0);
  EXPECT_EQ(summary->done, 1);
}

TEST_F(ClaimsJobTest, ACancelledJobIsRecordedAsCancelled) {
  std::atomic<bool> cancel{false};
  ClaimsJobOptions options = Options();
  options.cancel = &cancel;
  options.progress = [&](const ClaimsJobProgress& p) { cancel.store(p.done >= 8); };
  ASSERT_EQ(RunClaimsJob(*pipeline_, *db_, options)->state, ClaimsJobState::kCancelled);
  auto record = ReadClaimsJob(*db_, ClaimsJobId(dir_.file("claims.jsonl"), dir_.file("out.jsonl")));
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, ClaimsJobState::kCancelled);
  EXPECT_EQ((*record)->done, 8);
}

TEST_F(ClaimsJobTest, AQueuedRecordWithoutProgressRunsAsANewJob) {
  // How a server queues a job: a record with a state and no progress.
  ASSERT_TRUE(SetClaimsJobState(*db_, dir_.file("claims.jsonl"), dir_.file("out.jsonl"), ClaimsJobState::kQueued).ok());
  const std::string id = ClaimsJobId(dir_.file("claims.jsonl"), dir_.file("out.jsonl"));
  EXPECT_EQ(ReadClaimsJob(*db_, id)->value().state, ClaimsJobState::kQueued);
  auto summary = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->done, 50);
  EXPECT_EQ(summary->runs, 1);
  EXPECT_EQ(ReadClaimsJob(*db_, id)->value().state, ClaimsJobState::kDone);
}

TEST_F(ClaimsJobTest, AFailureBeforeTheJobBeganIsRecordedOnlyWhereARecordExists) {
  // `batch run` on a missing file leaves nothing; a job a server queued says it failed.
  ClaimsJobOptions options = Options();
  options.input_path = dir_.file("missing.jsonl");
  ASSERT_FALSE(RunClaimsJob(*pipeline_, *db_, options).ok());
  EXPECT_TRUE(ListClaimsJobs(*db_)->empty());
  ASSERT_TRUE(
      SetClaimsJobState(*db_, dir_.file("missing.jsonl"), dir_.file("out.jsonl"), ClaimsJobState::kQueued).ok());
  auto failed = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_FALSE(failed.ok());
  auto record = ReadClaimsJob(*db_, ClaimsJobId(dir_.file("missing.jsonl"), dir_.file("out.jsonl")));
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, ClaimsJobState::kFailed);
  EXPECT_EQ((*record)->error, failed.error().message);
}

TEST_F(ClaimsJobTest, OnlyLinesScoresThoseRowsExactlyAsAWholeRunDoes) {
  // Rows 1-40 name one provider: their claims-per-provider feature is 40 in a run over the
  // whole file, and must stay 40 when only a few of them are scored.
  std::string input;
  {
    std::ifstream in(dir_.file("claims.jsonl"));
    int line = 0;
    for (std::string text; std::getline(in, text);) {
      nlohmann::json claim = nlohmann::json::parse(text);
      if (++line <= 40) claim["provider_id"] = "P-0001";
      input += claim.dump() + "\n";
    }
  }
  testing::WriteFile(dir_.file("claims.jsonl"), input);
  ASSERT_TRUE(RunClaimsJob(*pipeline_, *db_, Options("whole.jsonl")).ok());
  const std::vector<std::string> whole = LinesWithoutTimings("whole.jsonl");
  for (int64_t first = 1; first <= 11; first += 2) {  // two rows at a time, and a line with no row
    const std::string output = "some-" + std::to_string(first) + ".jsonl";
    ClaimsJobOptions options = Options(output);
    options.only_lines = {first, first + 1, 999};
    auto summary = RunClaimsJob(*pipeline_, *db_, options);
    ASSERT_TRUE(summary.ok()) << summary.error().ToString();
    EXPECT_EQ(summary->total, 2);
    EXPECT_EQ(summary->done, 2);
    EXPECT_EQ(LinesWithoutTimings(output),
              (std::vector<std::string>{whole[static_cast<size_t>(first - 1)], whole[static_cast<size_t>(first)]}));
  }
  ClaimsJobOptions options = Options("some.jsonl");
  options.only_lines = {3};
  auto summary = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  // A job of its own: the id differs from that of a whole run into the same output.
  EXPECT_NE(summary->job_id, ClaimsJobId(dir_.file("claims.jsonl"), dir_.file("some.jsonl")));
}

TEST_F(ClaimsJobTest, ARetryRefusesAnInputWhoseRowsAreNotTheClaimsTheEarlierOutputNamed) {
  ClaimsJobOptions options = Options("retry.jsonl");
  options.only_lines = {2};
  options.expected_claim_ids = {{2, "CLM-not-this-one"}};
  auto refused = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  std::string second_line;
  {
    std::ifstream in(dir_.file("claims.jsonl"));
    std::getline(in, second_line);
    std::getline(in, second_line);
  }
  const std::string second_claim = nlohmann::json::parse(second_line).at("claim_id");
  EXPECT_EQ(refused.error().message, "line 2 holds claim " + second_claim +
                                         ", where the earlier output names CLM-not-this-one: the earlier output was "
                                         "not written from " +
                                         dir_.file("claims.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("retry.jsonl")));  // nothing written
  // A line the earlier output names that this input does not have.
  options.only_lines = {2, 51};
  options.expected_claim_ids = {{2, second_claim}, {51, "CLM-beyond-the-end"}};
  auto shorter = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_FALSE(shorter.ok());
  EXPECT_EQ(shorter.error().message,
            "1 of the 2 lines it names are not in this input: the earlier output was not "
            "written from " +
                dir_.file("claims.jsonl"));
  options.only_lines = {2};
  options.expected_claim_ids = {{2, second_claim}};
  EXPECT_EQ(RunClaimsJob(*pipeline_, *db_, options)->done, 1);
}

TEST_F(ClaimsJobTest, AnErrorLineRedactsACardNumberTheRowsValueHeld) {
  nlohmann::json claim = nlohmann::json::parse(
      testing::ReadFile(dir_.file("claims.jsonl")).substr(0, testing::ReadFile(dir_.file("claims.jsonl")).find('\n')));
  claim["claim_type"] = "card 4000 0012 3456 7899";
  testing::WriteFile(dir_.file("claims.jsonl"), claim.dump() + "\n");
  auto summary = RunClaimsJob(*pipeline_, *db_, Options());
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  const std::string output = testing::ReadFile(dir_.file("out.jsonl"));
  EXPECT_EQ(output.find("4000"), std::string::npos) << output;
  EXPECT_NE(output.find("[card number redacted]"), std::string::npos) << output;
}

TEST(BatchRunExitCode, ThreeForErrorRowsFirstThenFourForLlmShortfallsOverTheirShares) {
  ClaimsJobSummary s;
  s.total = 100;
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.1), 0);
  s.errors = 10;  // 10 % of the rows: not over 0.1
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.1), 0);
  s.errors = 11;
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.1), 3);
  s.errors = 0;
  s.llm_selected = 20;
  s.llm_shortfalls = {{"failed", 1}, {"cut_short", 1}};  // 10 % of what the LLM read
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.1), 0);
  s.llm_shortfalls["skipped"] = 1;
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.1), 4);
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.2), 0);
  s.errors = 11;  // both: the error rows decide
  EXPECT_EQ(BatchRunExitCode(s, 0.1, 0.1), 3);
  s.errors = 100;  // every row an error
  EXPECT_EQ(BatchRunExitCode(s, 1.0, 1.0), 3);
  EXPECT_EQ(BatchRunExitCode(ClaimsJobSummary{}, 1.0, 1.0), 3);  // no row at all
}

TEST_F(ClaimsJobTest, AStopAskedWhileCountingRowsEndsTheJobAtOnce) {
  std::atomic<bool> cancel{true};
  ClaimsJobOptions options = Options("stopped.jsonl");
  options.cancel = &cancel;
  auto summary = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->state, ClaimsJobState::kCancelled);
  EXPECT_EQ(summary->done, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("stopped.jsonl")));  // nothing written yet
}

}  // namespace
}  // namespace txscore::pipelines

namespace txscore::pipelines {
namespace {

TEST_F(ClaimsJobTest, ResumingCutsAStaleTailLongerThanTheRestOfTheOutput) {
  auto reference = RunClaimsJob(*pipeline_, *db_, Options("reference.jsonl"));
  ASSERT_TRUE(reference.ok());
  std::atomic<bool> cancel{false};
  ClaimsJobOptions options = Options();
  options.cancel = &cancel;
  options.progress = [&](const ClaimsJobProgress& p) { cancel.store(p.done >= 48); };  // 2 rows left
  ASSERT_EQ(RunClaimsJob(*pipeline_, *db_, options)->done, 48);
  {
    // Far more stale bytes than the 2 remaining rows will write: overwriting cannot hide them.
    std::ofstream out(dir_.file("out.jsonl"), std::ios::app);
    for (int i = 0; i < 200; ++i) out << "{\"line\": " << 49 + i << ", \"claim_id\": \"stale\"}\n";
  }
  options.progress = nullptr;
  options.cancel = nullptr;
  auto resumed = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(resumed.ok()) << resumed.error().ToString();
  EXPECT_EQ(resumed->done, 50);
  EXPECT_EQ(LinesWithoutTimings("out.jsonl"), LinesWithoutTimings("reference.jsonl"));
}

TEST_F(ClaimsJobTest, RestartOverALargerOldOutputLeavesOnlyTheNewRows) {
  ASSERT_EQ(RunClaimsJob(*pipeline_, *db_, Options())->done, 50);
  // The input shrinks to 10 claims; --restart starts over on it, into the same output.
  std::vector<std::string> first_ten;
  {
    std::ifstream in(dir_.file("claims.jsonl"));
    for (std::string line; first_ten.size() < 10 && std::getline(in, line);) first_ten.push_back(line);
  }
  {
    std::ofstream out(dir_.file("claims.jsonl"), std::ios::trunc);
    for (const std::string& line : first_ten) out << line << "\n";
  }
  ClaimsJobOptions options = Options();
  options.restart = true;
  auto restarted = RunClaimsJob(*pipeline_, *db_, options);
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  EXPECT_EQ(restarted->done, 10);
  EXPECT_EQ(LinesWithoutTimings("out.jsonl").size(), 10u);  // none of the old 50 left behind
  ASSERT_TRUE(RunClaimsJob(*pipeline_, *db_, Options("fresh.jsonl")).ok());
  EXPECT_EQ(LinesWithoutTimings("out.jsonl"), LinesWithoutTimings("fresh.jsonl"));
}

}  // namespace
}  // namespace txscore::pipelines
