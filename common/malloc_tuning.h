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

// Returns every free page of every heap to the OS (glibc's malloc_trim), whatever thread's
// heap it is in. Takes each heap's lock in turn while it trims it.
void ReturnFreedHeapMemory();

// ReturnFreedHeapMemory on a thread of its own, started here; returns at once. A trim asked
// for while another has not begun yet is that one (it will see this memory freed too). Called
// when a model's weights are freed (llm::Decoder's destructor), which may be on a request's
// thread (the last request holding a replaced pipeline), before its reply.
//
// Why: weights are loaded on whatever thread loads the model (a reload runs on one of the
// admin port's threads) and, below 32 MiB a tensor, come from that thread's heap; once freed
// they stay there (KeepFreedHeapMemory), and the next reload, on another thread, allocates in
// another heap. Reloading the 0.5B checkpoint seven times took the server from 4.3 to 9 GB.
// Costs the next forward passes their page faults again, once.
void ReturnFreedHeapMemorySoon();
// Trims asked for by ReturnFreedHeapMemorySoon and not finished yet (tests wait for 0).
int HeapTrimsInFlight();

}  // namespace txscore
