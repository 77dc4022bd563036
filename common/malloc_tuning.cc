#include "common/malloc_tuning.h"

#include <malloc.h>

namespace txscore {

void KeepFreedHeapMemory() {
  // Setting either threshold also turns off glibc's dynamic threshold, which would otherwise
  // start low (128 KiB) and move with the sizes freed.
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptFreeHeapBytes));
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

}  // namespace txscore
