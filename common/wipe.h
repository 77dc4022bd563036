// Overwriting secrets before their memory is given back: card numbers, card verification
// codes, received frames, key material. OPENSSL_cleanse, which the compiler may not optimise
// away as it may a memset of memory about to be freed.
#pragma once

#include <cstddef>
#include <string>

namespace txscore {

// Overwrites a string's bytes and clears it.
void WipeString(std::string* secret);
// The same for a buffer that is not a string (e.g. a received Thrift frame).
void WipeBytes(void* data, size_t size);

}  // namespace txscore
