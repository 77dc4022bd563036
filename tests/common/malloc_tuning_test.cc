#include "common/malloc_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace txscore {
namespace {

// The setting is process-wide, so this binary holds only this test.
TEST(KeepFreedHeapMemory, LargeBlocksComeFromTheHeapAndStayThereWhenFreed) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc, whose behaviour this checks (scripts/asan.sh)";
#endif
  constexpr size_t kBlock = size_t{16} << 20;  // above glibc's default mmap threshold (128 KiB)
  KeepFreedHeapMemory();
  const struct mallinfo2 before = mallinfo2();
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  const struct mallinfo2 held = mallinfo2();
  EXPECT_EQ(held.hblks, before.hblks) << "the block got its own mapping";
  EXPECT_GE(held.arena, before.arena + kBlock);
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  // Not trimmed: the heap keeps the block's memory, free for the next allocation.
  EXPECT_EQ(after.arena, held.arena);
  EXPECT_GE(after.fordblks, kBlock);
}

}  // namespace
}  // namespace txscore
