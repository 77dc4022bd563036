#include "common/file_io.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/test_support.h"

namespace txscore {
namespace {

TEST(ReadFileBounded, ReadsARegularFile) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("a"), "hello");
  EXPECT_EQ(ReadFileBounded(dir.file("a"), 5).value(), "hello");
}

TEST(ReadFileBounded, RefusesWhatIsNotARegularFileWithoutThrowing) {
  testing::TempDir dir;
  const Result<std::string> directory = ReadFileBounded(dir.path(), 1 << 20, "model file");
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(directory.error().message, "model file " + dir.path() + " is not a regular file");
  // /proc/self/mem looks like a regular file of size 0, and fails to read at offset 0.
  const Result<std::string> special = ReadFileBounded("/proc/self/mem", 1 << 20, "model file");
  ASSERT_FALSE(special.ok());
  EXPECT_EQ(special.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(ReadFileBounded(dir.file("none"), 10).error().code, ErrorCode::kNotFound);
}

TEST(ReadFileBounded, RefusesAFileOverTheLimit) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("big"), std::string(11, 'x'));
  const Result<std::string> big = ReadFileBounded(dir.file("big"), 10);
  EXPECT_TRUE(testing::IsError(big, ErrorCode::kResourceExhausted,
                               "file " + dir.file("big") + " is 11 bytes; the limit is 10"));
}

}  // namespace
}  // namespace txscore
