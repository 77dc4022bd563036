#include "tests/fuzz/fuzz_input.h"

#include <cstdio>
#include <cstdlib>

namespace txscore::fuzz {

void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace txscore::fuzz
