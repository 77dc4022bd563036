#include "pipelines/claims_rows.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

constexpr char kCsvHeader[] =
    "claim_id,policy_id,claimant_id,incident_date,report_date,claim_type,amount_claimed,policy_limit,prior_claims,"
    "provider_id,narrative,adjuster_notes\n";

std::string JsonClaim(const std::string& id) {
  return R"({"claim_id": ")" + id +
         R"(", "policy_id": "POL-1", "claimant_id": "C-1", "incident_date": "2026-02-01", )"
         R"("report_date": "2026-02-03", "claim_type": "burglary", "amount_claimed": 900.0, )"
         R"("policy_limit": 10000.0, "prior_claims": 0, "provider_id": "P-1", "narrative": "A door forced."})";
}

std::string CsvClaim(const std::string& id, const std::string& narrative = "A door forced.") {
  return id + ",POL-1,C-1,2026-02-01,2026-02-03,burglary,900.00,10000.00,0,P-1,\"" + narrative + "\",\n";
}

// Every row of `path`: its line, and its claim id or its error message.
std::vector<std::pair<int64_t, std::string>> ReadAll(const std::string& path) {
  Result<RowReader> reader = RowReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.error().ToString();
  std::vector<std::pair<int64_t, std::string>> rows;
  if (!reader.ok()) return rows;
  Row row;
  while (reader->Next(&row)) {
    rows.emplace_back(row.line, row.claim.ok() ? row.claim->claim_id : "error: " + row.claim.error().message);
  }
  return rows;
}

using Rows = std::vector<std::pair<int64_t, std::string>>;

TEST(RowReader, NumbersJsonLinesByTheirLineAndSkipsBlankLines) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("in.jsonl"),
                     JsonClaim("A") + "\n\n  \t\r\n" + JsonClaim("B") + "\r\n\n" + JsonClaim("C") + "\n");
  EXPECT_EQ(ReadAll(dir.file("in.jsonl")), (Rows{{1, "A"}, {4, "B"}, {6, "C"}}));
}

TEST(RowReader, AJsonLineThatIsNotAClaimIsAnErrorRowAndReadingGoesOn) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("in.jsonl"), JsonClaim("A") + "\n{not json\n[1]\n" + JsonClaim("B"));
  EXPECT_EQ(
      ReadAll(dir.file("in.jsonl")),
      (Rows{
          {1, "A"}, {2, "error: the line is not valid JSON"}, {3, "error: the line is not a JSON object"}, {4, "B"}}));
}

TEST(RowReader, NumbersCsvRowsByTheLineTheyStartOnAndSkipsBlankLines) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("in.csv"), std::string(kCsvHeader) + "\n" + CsvClaim("A") + CsvClaim("B", "two\nlines") +
                                             " \n" + CsvClaim("C"));
  EXPECT_EQ(ReadAll(dir.file("in.csv")), (Rows{{3, "A"}, {4, "B"}, {7, "C"}}));
}

TEST(RowReader, ACsvRowKeepsTheNewlinesOfAQuotedField) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("in.csv"), std::string(kCsvHeader) + CsvClaim("A", "one\n\"\"two\"\"\n\nthree"));
  Result<RowReader> reader = RowReader::Open(dir.file("in.csv"));
  ASSERT_TRUE(reader.ok()) << reader.error().ToString();
  Row row;
  ASSERT_TRUE(reader->Next(&row));
  ASSERT_TRUE(row.claim.ok()) << row.claim.error().ToString();
  EXPECT_EQ(row.line, 2);
  EXPECT_EQ(row.claim->narrative, "one\n\"two\"\n\nthree");
  EXPECT_FALSE(reader->Next(&row));
}

TEST(RowReader, IgnoresAByteOrderMarkBeforeTheFirstRow) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("in.csv"), std::string("\xEF\xBB\xBF") + kCsvHeader + CsvClaim("A"));
  testing::WriteFile(dir.file("in.jsonl"), "\xEF\xBB\xBF" + JsonClaim("B") + "\n");
  EXPECT_EQ(ReadAll(dir.file("in.csv")), (Rows{{2, "A"}}));
  EXPECT_EQ(ReadAll(dir.file("in.jsonl")), (Rows{{1, "B"}}));
}

TEST(RowReader, ARowOverTheLimitIsAnErrorRowAndTheNextRowIsRead) {
  testing::TempDir dir;
  const std::string too_long = "the row is longer than 1048576 bytes (in a CSV file: is a quote left open?)";
  testing::WriteFile(dir.file("in.jsonl"),
                     std::string(RowReader::kMaxRowBytes + 1, ' ') + "x\n" + JsonClaim("B") + "\n");
  EXPECT_EQ(ReadAll(dir.file("in.jsonl")), (Rows{{1, "error: " + too_long}, {2, "B"}}));
  testing::WriteFile(dir.file("in.csv"), std::string(kCsvHeader) +
                                             CsvClaim("A", std::string(RowReader::kMaxRowBytes, 'x')) + CsvClaim("B"));
  EXPECT_EQ(ReadAll(dir.file("in.csv")), (Rows{{2, "error: " + too_long}, {3, "B"}}));
}

TEST(RowReader, AMissingFileIsNotFound) {
  testing::TempDir dir;
  Result<RowReader> reader = RowReader::Open(dir.file("missing.jsonl"));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(reader.error().message, "input file " + dir.file("missing.jsonl") + " does not exist or cannot be read");
}

TEST(RowReader, RefusesACsvFileWithoutAUsableHeader) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("empty.csv"), "\n \n");
  Result<RowReader> empty = RowReader::Open(dir.file("empty.csv"));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(empty.error().message, dir.file("empty.csv") + ": the CSV file has no header row");

  testing::WriteFile(dir.file("bad.csv"), "claim_id,colour\n");
  Result<RowReader> bad = RowReader::Open(dir.file("bad.csv"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message, dir.file("bad.csv") + ":1: unknown column \"colour\" in the header");
  EXPECT_EQ(bad.error().field, "colour");
}

TEST(RowReader, AStopEndsTheReadingAtTheNextLine) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("in.jsonl"), JsonClaim("A") + "\n" + JsonClaim("B") + "\n" + JsonClaim("C") + "\n");
  int lines_seen = 0;
  Result<RowReader> reader = RowReader::Open(dir.file("in.jsonl"), [&lines_seen] { return ++lines_seen > 2; });
  ASSERT_TRUE(reader.ok()) << reader.error().ToString();
  Row row;
  ASSERT_TRUE(reader->Next(&row));
  EXPECT_EQ(row.claim->claim_id, "A");
  ASSERT_TRUE(reader->Next(&row));
  EXPECT_EQ(row.claim->claim_id, "B");
  EXPECT_FALSE(reader->stopped());
  EXPECT_FALSE(reader->Next(&row));
  EXPECT_TRUE(reader->stopped());
  EXPECT_EQ(lines_seen, 3);
}

}  // namespace
}  // namespace txscore::pipelines
