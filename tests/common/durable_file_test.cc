#include "common/durable_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/test_support.h"

namespace txscore {
namespace {

TEST(AppendOnlyFile, KeepsWhatWasRecordedCutsTheRestAndAppends) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("out"), "kept|stale tail");
  AppendOnlyFile file;
  ASSERT_TRUE(file.Open(dir.file("out"), 5).ok());
  EXPECT_EQ(testing::ReadFile(dir.file("out")), "kept|");
  ASSERT_TRUE(file.AppendDurably("new").ok());
  EXPECT_EQ(file.length(), 8);
  EXPECT_EQ(testing::ReadFile(dir.file("out")), "kept|new");
}

// A claims job's output holds claim ids and findings: its owner's alone, whatever the umask.
TEST(AppendOnlyFile, ANewFileIsForItsOwnerAlone) {
  testing::TempDir dir;
  const mode_t before = ::umask(0);
  AppendOnlyFile file;
  const Status opened = file.Open(dir.file("out"), 0);
  ::umask(before);
  ASSERT_TRUE(opened.ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(AppendOnlyFile, RefusesAFileShorterThanWhatWasRecorded) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("out"), "abc");
  AppendOnlyFile file;
  Status opened = file.Open(dir.file("out"), 10);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(opened.error().message, dir.file("out") + " is shorter (3 bytes) than the 10 bytes recorded as written");
  EXPECT_EQ(testing::ReadFile(dir.file("out")), "abc");  // left as it was
}

TEST(WriteFileDurably, ReplacesTheContentWithTheModeAsked) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("f"), "a longer old content");
  ASSERT_TRUE(WriteFileDurably(dir.file("f"), "new").ok());  // an existing file keeps its mode
  EXPECT_EQ(testing::ReadFile(dir.file("f")), "new");
  ASSERT_TRUE(WriteFileDurably(dir.file("g"), "secret").ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("g").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(WriteFileDurably(dir.file("no/such/dir/f"), "x").ok());
  EXPECT_TRUE(SyncDirectory(dir.path()).ok());
  EXPECT_FALSE(SyncDirectory(dir.file("f")).ok());  // not a directory
}

// A public file (the audit trail's public keys) must be readable by others although txscore runs
// with umask 077: the new file gets the mode asked for, and a secret's 0600 stays 0600 under 0.
TEST(WriteNewFileDurably, GivesTheNewFileExactlyTheModeAskedWhateverTheUmask) {
  testing::TempDir dir;
  const mode_t before = ::umask(077);
  const Status public_written = WriteNewFileDurably(dir.file("public"), "no secret", 0644);
  ::umask(0);
  const Status secret_written = WriteNewFileDurably(dir.file("secret"), "secret", 0600);
  ::umask(before);
  ASSERT_TRUE(public_written.ok());
  ASSERT_TRUE(secret_written.ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("public").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::stat(dir.file("secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(testing::ReadFile(dir.file("public")), "no secret");
}

}  // namespace
}  // namespace txscore
