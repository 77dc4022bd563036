// What every fuzz target shares: the libFuzzer entry points, and how a target reads its input.
// Each target is built twice: with clang's libFuzzer (scripts/fuzz.sh) to search, and with the
// ordinary build and replay_main.cc, which runs every file of the target's corpus under CTest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
// Optional: what a target sets up in LLVMFuzzerInitialize and must tear down, called by the
// replay after the last input (libFuzzer has no such hook).
extern "C" __attribute__((weak)) void TxscoreFuzzTeardown();

namespace txscore::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// A broken invariant: abort, so that libFuzzer keeps the input and the replay test fails.
[[noreturn]] void Fail(const std::string& what);

}  // namespace txscore::fuzz
