// How the process's malloc hands memory back to the OS.
#pragma once

#include <cstddef>

namespace txscore {

// Default: 256 MiB. Free memory malloc keeps at the top of each heap instead of returning it.
inline constexpr size_t kKeptFreeHeapBytes = size_t{256} << 20;

// Makes glibc malloc keep freed memory for reuse: free space at the top of a heap is returned
// only beyond kKeptFreeHeapBytes, and allocations up to 32 MiB (glibc's largest threshold)
// come from the heaps rather than from their own mappings. Call once, first thing in main.
//
// Why: by default glibc returns a heap's free top (madvise) and unmaps large blocks on every
// free, so a libtorch forward pass, which frees and allocates the same sizes layer after
// layer, faults its memory back in page by page, and the kernel's work for those faults
// delayed other threads and processes on the same cores (docs/claims-jobs.md, "Priority"). Measured on the
// claims job's LLM stage (`perf stat -e page-faults` over 5 s): 162,000 faults without this
// setting, 1,249 with it.
void KeepFreedHeapMemory();

}  // namespace txscore
