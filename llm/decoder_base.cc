// What every Decoder shares, apart from libtorch: so that decoders of other libraries (the
// tests' fakes) link without it.
#include "common/malloc_tuning.h"
#include "llm/decoder.h"

namespace txscore::llm {

// Runs after the implementation's members, the weights among them, are destroyed; the trim
// itself runs on a thread of its own, not on the one that dropped the decoder.
Decoder::~Decoder() { ReturnFreedHeapMemorySoon(); }

}  // namespace txscore::llm
