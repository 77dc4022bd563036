#include "common/malloc_tuning.h"

#include <malloc.h>

#include <atomic>
#include <system_error>
#include <thread>

namespace txscore {

void KeepFreedHeapMemory() {
  // Setting either threshold also turns off glibc's dynamic threshold, which would otherwise
  // start low (128 KiB) and move with the sizes freed.
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptFreeHeapBytes));
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

void ReturnFreedHeapMemory() { malloc_trim(0); }

namespace {
std::atomic<bool> trim_not_begun{false};
std::atomic<int> trims_in_flight{0};

void TrimNow() {
  trim_not_begun = false;  // memory freed from here on needs another trim
  ReturnFreedHeapMemory();
  trims_in_flight.fetch_sub(1);
}
}  // namespace

void ReturnFreedHeapMemorySoon() {
  if (trim_not_begun.exchange(true)) return;
  trims_in_flight.fetch_add(1);
  try {
    std::thread(TrimNow).detach();
  } catch (const std::system_error&) {
    TrimNow();  // no thread to be had: here, then
  }
}

int HeapTrimsInFlight() { return trims_in_flight.load(); }

}  // namespace txscore
