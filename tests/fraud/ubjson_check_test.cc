#include "fraud/ubjson_check.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

using namespace std::string_literals;

// {"a": [1, 2.5], "s": "hi", "t": typed float32 array of 2, "n": null}
const std::string kDocument =
    "{"s
    "U\x01"
    "a"
    "["
    "i\x01"
    "D\x40\x04\x00\x00\x00\x00\x00\x00"
    "]"
    "U\x01"
    "s"
    "SU\x02"
    "hi"
    "U\x01"
    "t"
    "[$d#U\x02"
    "\x3f\x80\x00\x00"
    "\x40\x00\x00\x00"
    "U\x01"
    "n"
    "Z"
    "}"s;

TEST(CheckUbjsonDocument, AcceptsEveryKindOfValueXGBoostWrites) {
  EXPECT_TRUE(CheckUbjsonDocument(kDocument).ok());
  EXPECT_TRUE(CheckUbjsonDocument("{#U\x01"
                                  "U\x01"
                                  "kT"s)
                  .ok());                                                           // counted object
  EXPECT_TRUE(CheckUbjsonDocument("[$Z#L\x7f\xff\xff\xff\xff\xff\xff\xff"s).ok());  // nulls take no bytes
  EXPECT_TRUE(CheckUbjsonDocument("[NT]N"s).ok());                                  // no-ops are skipped
}

TEST(CheckUbjsonDocument, RefusesEveryTruncationOfADocument) {
  for (size_t cut = 0; cut < kDocument.size(); ++cut) {
    Status status = CheckUbjsonDocument(std::string_view(kDocument).substr(0, cut));
    ASSERT_FALSE(status.ok()) << "prefix of " << cut << " bytes accepted";
    EXPECT_EQ(status.error().code, ErrorCode::kDataLoss);
  }
}

TEST(CheckUbjsonDocument, NamesWhatIsWrongAndWhere) {
  auto message = [](const std::string& bytes) { return CheckUbjsonDocument(bytes).error().message; };
  EXPECT_EQ(message("SU\x05"
                    "ab"s),
            "malformed UBJSON: the input ends inside a string at byte 3");
  EXPECT_EQ(message("[$d#U\x03"
                    "\x00\x00\x00\x00"s),
            "malformed UBJSON: the input ends inside a typed array at byte 6");
  EXPECT_EQ(message("Si\xff"s), "malformed UBJSON: a length is negative at byte 2");
  EXPECT_EQ(message("[#L\x00\x00\x00\x00\x10\x00\x00\x00"s),
            "malformed UBJSON: a container counts more elements than the input holds at byte 11");
  EXPECT_EQ(message("{Sd}"s), "malformed UBJSON: a length has the non-integer marker 'S' at byte 1");
  EXPECT_EQ(message("[$d]"s), "malformed UBJSON: a typed container has no count at byte 3");
  EXPECT_EQ(message("x"s), "malformed UBJSON: unknown marker 'x' at byte 0");
  EXPECT_EQ(message("TT"s), "malformed UBJSON: unexpected bytes after the document at byte 1");
}

TEST(CheckUbjsonDocument, RefusesNestingBeyondTheLimit) {
  UbjsonCheckOptions options;
  options.max_depth = 3;
  EXPECT_TRUE(CheckUbjsonDocument("[[[T]]]", options).ok());
  Status deep = CheckUbjsonDocument("[[[[T]]]]", options);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.error().message, "malformed UBJSON: containers nest deeper than 3 at byte 4");
  // The default limit keeps a hostile file from exhausting the stack.
  EXPECT_FALSE(CheckUbjsonDocument(std::string(100000, '[')).ok());
}

TEST(CheckUbjsonDocument, RefusesTruncationsOfATrainedModel) {
  const std::string model = testing::ReadFile(testing::SmallModelDir() + "/fraud.ubj");
  ASSERT_TRUE(CheckUbjsonDocument(model).ok());
  // Spread cuts over the whole file, plus the last few bytes where the closing brackets are.
  for (size_t i = 1; i <= 400; ++i) {
    const size_t cut = model.size() * i / 401;
    ASSERT_FALSE(CheckUbjsonDocument(std::string_view(model).substr(0, cut)).ok()) << "cut at " << cut;
  }
  for (size_t cut = model.size() - 8; cut < model.size(); ++cut) {
    ASSERT_FALSE(CheckUbjsonDocument(std::string_view(model).substr(0, cut)).ok()) << "cut at " << cut;
  }
}

}  // namespace
}  // namespace txscore::fraud
