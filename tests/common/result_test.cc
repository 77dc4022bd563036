#include "common/result.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/test_support.h"

namespace txscore {
namespace {

Result<std::unique_ptr<int>> Boxed(int value) {
  if (value < 0) return InvalidArgument("negative", "value");
  return std::make_unique<int>(value);
}

// Two uses on separate lines in one function, a move-only value, an early return.
Result<int> SumOfBoxes(int a, int b) {
  TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<int> first, Boxed(a));
  TXSCORE_ASSIGN_OR_RETURN(const std::unique_ptr<int> second, Boxed(b));
  return *first + *second;
}

TEST(AssignOrReturn, AssignsTheValueOrReturnsTheErrorAsItIs) {
  EXPECT_EQ(SumOfBoxes(2, 3).value(), 5);
  Result<int> failed = SumOfBoxes(2, -1);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(failed.error().message, "negative");
  EXPECT_EQ(failed.error().field, "value");
}

// An invalid argument's message is built from what a caller sent: whichever validation quoted a
// card number, the error never carries it (to the caller, a log, a job output or the trail).
TEST(InvalidArgument, RedactsCardNumbersInItsMessageAndLeavesOtherErrorsAlone) {
  const Error quoted = InvalidArgument("\"4000 0012 3456 7899\" is not a date of the form YYYY-MM-DD", "incident_date");
  EXPECT_EQ(quoted.message, "\"[card number redacted]\" is not a date of the form YYYY-MM-DD");
  EXPECT_EQ(quoted.field, "incident_date");
  EXPECT_EQ(InvalidArgument("amount 1200.50 is over the limit").message, "amount 1200.50 is over the limit");
  // Other codes carry no caller input by contract, and keep long numbers exactly (times, seqs).
  EXPECT_EQ(DataLoss("entry at 4000001234567899").message, "entry at 4000001234567899");
}

TEST(IsError, PassesOnlyForTheExactCodeAndMessage) {
  const Result<int> failed = InvalidArgument("amount must be positive", "amount");
  EXPECT_TRUE(testing::IsError(failed, ErrorCode::kInvalidArgument, "amount must be positive"));
  EXPECT_FALSE(testing::IsError(failed, ErrorCode::kNotFound, "amount must be positive"));
  EXPECT_FALSE(testing::IsError(failed, ErrorCode::kInvalidArgument, "amount must be"));
  EXPECT_FALSE(testing::IsError(Result<int>(3), ErrorCode::kInvalidArgument, "amount must be positive"));
  const ::testing::AssertionResult wrong = testing::IsError(Status(Internal("boom")), ErrorCode::kDataLoss, "boom");
  EXPECT_EQ(std::string(wrong.message()), "expected data loss: boom\n   but got internal: boom");
  EXPECT_TRUE(testing::IsError(Status(Internal("boom")), ErrorCode::kInternal, "boom"));
}

}  // namespace
}  // namespace txscore
