#include "pipelines/claims_job_record.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// A record with every field set to a value other than its default.
JobState EveryField() {
  JobState state;
  state.input = "/data/in.jsonl";
  state.output = "/data/out.jsonl";
  state.input_sha256 = "ab12";
  state.input_version = "2049:12:300:1700000000000000000:1700000000000000001";
  state.chunk_size = 64;
  state.total = 10;
  state.rows_done = 7;
  state.output_bytes = 4096;
  state.error = "disk full";
  state.restart = true;
  ClaimsJobSummary& s = state.summary;
  s.state = ClaimsJobState::kFailed;
  s.errors = 2;
  s.analysed = 3;
  s.llm_selected = 4;
  s.llm_shortfalls = {{"failed", 1}};
  s.decisions = {{"APPROVE", 4}, {"REVIEW", 1}};
  s.flags = {{"amount_mismatch", 2}};
  s.stage_us = {{"claims_model", 1500}};
  s.devices = {{"claims_model", "cpu"}};
  s.elapsed_s = 1.5;
  s.runs = 2;
  s.pipeline_digests = {"sha256:0a", "sha256:0b"};
  return state;
}

constexpr char kEveryFieldEncoded[] =
    R"({"input":"/data/in.jsonl","output":"/data/out.jsonl","input_sha256":"ab12",)"
    R"("input_version":"2049:12:300:1700000000000000000:1700000000000000001","chunk_size":64,"total":10,)"
    R"("rows_done":7,"output_bytes":4096,"state":"failed","error":"disk full","restart":true,"errors":2,)"
    R"("analysed":3,"llm_selected":4,"llm_shortfalls":{"failed":1},"decisions":{"APPROVE":4,"REVIEW":1},)"
    R"("flags":{"amount_mismatch":2},"stage_us":{"claims_model":1500},"devices":{"claims_model":"cpu"},)"
    R"("elapsed_s":1.5,"runs":2,"pipeline_digests":["sha256:0a","sha256:0b"]})";

TEST(JobState, EncodesEveryFieldInItsOrder) { EXPECT_EQ(EveryField().Encode(), kEveryFieldEncoded); }

TEST(JobState, DecodeRestoresEveryFieldEncodeWrote) {
  Result<JobState> decoded = JobState::Decode(kEveryFieldEncoded);
  ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
  const JobState& d = *decoded;
  EXPECT_EQ(d.input, "/data/in.jsonl");
  EXPECT_EQ(d.output, "/data/out.jsonl");
  EXPECT_EQ(d.input_sha256, "ab12");
  EXPECT_EQ(d.input_version, "2049:12:300:1700000000000000000:1700000000000000001");
  EXPECT_EQ(d.chunk_size, 64);
  EXPECT_EQ(d.total, 10);
  EXPECT_EQ(d.rows_done, 7);
  EXPECT_EQ(d.output_bytes, 4096);
  EXPECT_EQ(d.error, "disk full");
  EXPECT_TRUE(d.restart);
  EXPECT_TRUE(d.begun());
  const ClaimsJobSummary& s = d.summary;
  EXPECT_EQ(s.state, ClaimsJobState::kFailed);
  EXPECT_EQ(s.errors, 2);
  EXPECT_EQ(s.analysed, 3);
  EXPECT_EQ(s.llm_selected, 4);
  EXPECT_EQ(s.llm_shortfalls, (std::map<std::string, int64_t>{{"failed", 1}}));
  EXPECT_EQ(s.decisions, (std::map<std::string, int64_t>{{"APPROVE", 4}, {"REVIEW", 1}}));
  EXPECT_EQ(s.flags, (std::map<std::string, int64_t>{{"amount_mismatch", 2}}));
  EXPECT_EQ(s.stage_us, (std::map<std::string, int64_t>{{"claims_model", 1500}}));
  EXPECT_EQ(s.devices, (std::map<std::string, std::string>{{"claims_model", "cpu"}}));
  EXPECT_EQ(s.elapsed_s, 1.5);
  EXPECT_EQ(s.runs, 2);
  EXPECT_EQ(s.pipeline_digests, (std::vector<std::string>{"sha256:0a", "sha256:0b"}));
  EXPECT_EQ(d.Encode(), kEveryFieldEncoded);
}

TEST(JobState, ARecordOfAJobThatHasNotBegunDecodesWithDefaults) {
  Result<JobState> decoded = JobState::Decode(R"({"input":"/in","output":"/out","state":"queued"})");
  ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
  EXPECT_FALSE(decoded->begun());
  EXPECT_EQ(decoded->summary.state, ClaimsJobState::kQueued);
  EXPECT_EQ(decoded->error, "");
  EXPECT_FALSE(decoded->restart);
  EXPECT_EQ(decoded->chunk_size, 0);
  EXPECT_EQ(decoded->rows_done, 0);
  EXPECT_EQ(decoded->summary.runs, 0);
  EXPECT_TRUE(decoded->summary.decisions.empty());
  EXPECT_TRUE(decoded->summary.pipeline_digests.empty());  // records from before digests were kept
}

TEST(JobState, RefusesACorruptRecordWithDataLoss) {
  for (const char* corrupt : {"", "{\"input\":\"/in\"", "[]", "7", R"({"output":"/out","state":"done"})",
                              R"({"input":1,"output":"/out","state":"done"})",
                              R"({"input":"/in","output":"/out","state":"done","rows_done":"seven"})"}) {
    Result<JobState> decoded = JobState::Decode(corrupt);
    ASSERT_FALSE(decoded.ok()) << corrupt;
    EXPECT_EQ(decoded.error().code, ErrorCode::kDataLoss) << corrupt;
    EXPECT_EQ(decoded.error().message.rfind("a claims job record is malformed: ", 0), 0u) << decoded.error().message;
  }
}

TEST(JobState, RefusesAStateItDoesNotKnow) {
  EXPECT_TRUE(testing::IsError(JobState::Decode(R"({"input":"/in","output":"/out","state":"paused"})"),
                               ErrorCode::kDataLoss, "a claims job record is malformed: unknown state \"paused\""));
  for (ClaimsJobState state : {ClaimsJobState::kQueued, ClaimsJobState::kRunning, ClaimsJobState::kInterrupted,
                               ClaimsJobState::kCancelled, ClaimsJobState::kFailed, ClaimsJobState::kDone}) {
    EXPECT_EQ(ParseClaimsJobState(ClaimsJobStateName(state)), state);
  }
}

TEST(ClaimsJobId, IsTheShortDigestOfThePathsAndTheOnlyLines) {
  EXPECT_EQ(ShortDigest("abc"), "ba7816bf8f01cfea");
  EXPECT_EQ(ClaimsJobId("/data/in.jsonl", "/data/out.jsonl"), "825db671240b25f2");
  EXPECT_EQ(ClaimsJobId("/data/in.jsonl", "/data/out.jsonl", {7, 3}), "2d022487136d0f2d");
  EXPECT_EQ(ClaimsJobKey("825db671240b25f2"), "claims-job/825db671240b25f2");
}

class ClaimsJobRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal}).value();
  }
  testing::TempDir dir_;
  std::unique_ptr<storage::Database> db_;
};

TEST_F(ClaimsJobRecordTest, ReadsWhatSaveStateWrote) {
  const std::string id = ClaimsJobId("/data/in.jsonl", "/data/out.jsonl");
  ASSERT_TRUE(SaveState(*db_, ClaimsJobKey(id), EveryField()).ok());
  auto record = ReadClaimsJob(*db_, id);
  ASSERT_TRUE(record.ok()) << record.error().ToString();
  ASSERT_TRUE(record->has_value());
  const ClaimsJobRecord& r = **record;
  EXPECT_EQ(r.input, "/data/in.jsonl");
  EXPECT_EQ(r.output, "/data/out.jsonl");
  EXPECT_EQ(r.state, ClaimsJobState::kFailed);
  EXPECT_EQ(r.error, "disk full");
  EXPECT_TRUE(r.restart);
  EXPECT_EQ(r.total, 10);
  EXPECT_EQ(r.done, 7);
  EXPECT_EQ(r.errors, 2);
  EXPECT_EQ(r.llm_selected, 4);
  EXPECT_EQ(r.llm_shortfalls, (std::map<std::string, int64_t>{{"failed", 1}}));
  EXPECT_EQ(r.elapsed_s, 1.5);

  auto missing = ReadClaimsJob(*db_, "0000000000000000");
  ASSERT_TRUE(missing.ok()) << missing.error().ToString();
  EXPECT_FALSE(missing->has_value());
}

TEST_F(ClaimsJobRecordTest, SetStateRecordsAQueuedJobAndLaterKeepsItsProgress) {
  ASSERT_TRUE(SetClaimsJobState(*db_, "/data/in.jsonl", "/data/out.jsonl", ClaimsJobState::kQueued, "", true).ok());
  auto queued = ReadClaimsJob(*db_, "825db671240b25f2");
  ASSERT_TRUE(queued.ok() && queued->has_value());
  EXPECT_EQ((*queued)->state, ClaimsJobState::kQueued);
  EXPECT_TRUE((*queued)->restart);
  EXPECT_EQ((*queued)->done, 0);

  ASSERT_TRUE(SaveState(*db_, ClaimsJobKey("825db671240b25f2"), EveryField()).ok());
  ASSERT_TRUE(SetClaimsJobState(*db_, "/data/in.jsonl", "/data/out.jsonl", ClaimsJobState::kInterrupted).ok());
  auto stored = db_->Get(storage::ColumnFamily::kJobs, "claims-job/825db671240b25f2");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  JobState expected = EveryField();
  expected.summary.state = ClaimsJobState::kInterrupted;
  expected.error = "";
  expected.restart = false;
  EXPECT_EQ(**stored, expected.Encode());
}

TEST_F(ClaimsJobRecordTest, ListsJobsByIdAndIgnoresOtherKeys) {
  ASSERT_TRUE(SetClaimsJobState(*db_, "/data/in.jsonl", "/data/out.jsonl", ClaimsJobState::kQueued).ok());
  ASSERT_TRUE(SetClaimsJobState(*db_, "/data/in.jsonl", "/data/other.jsonl", ClaimsJobState::kDone).ok());
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kJobs, "other-job/1", "not a claims job");
  ASSERT_TRUE(db_->Write(batch).ok());
  auto jobs = ListClaimsJobs(*db_);
  ASSERT_TRUE(jobs.ok()) << jobs.error().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ(jobs->at("825db671240b25f2").state, ClaimsJobState::kQueued);
  EXPECT_EQ(jobs->at(ClaimsJobId("/data/in.jsonl", "/data/other.jsonl")).state, ClaimsJobState::kDone);
  EXPECT_EQ(jobs->at(ClaimsJobId("/data/in.jsonl", "/data/other.jsonl")).output, "/data/other.jsonl");
}

TEST_F(ClaimsJobRecordTest, ACorruptStoredRecordIsDataLossForEveryReader) {
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kJobs, "claims-job/825db671240b25f2", "{\"input\":");
  ASSERT_TRUE(db_->Write(batch).ok());
  auto read = ReadClaimsJob(*db_, "825db671240b25f2");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ErrorCode::kDataLoss);
  auto listed = ListClaimsJobs(*db_);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().code, ErrorCode::kDataLoss);
  Status set = SetClaimsJobState(*db_, "/data/in.jsonl", "/data/out.jsonl", ClaimsJobState::kQueued);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.error().code, ErrorCode::kDataLoss);
}

}  // namespace
}  // namespace txscore::pipelines
