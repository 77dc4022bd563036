// What this binary is: txscore's version, the commit it was built from, and the compiler.
// Shown by `txscore version`, GET /v2 (server metadata) and the txscore_build_info gauge.
#pragma once

#include <string>

namespace txscore::service {

struct BuildInfo {
  std::string version;   // the project's version (CMakeLists.txt), e.g. "0.14.0"
  std::string commit;    // `git describe --always --dirty` of the source tree at build time
  std::string compiler;  // e.g. "GNU 12.2.0"
};

const BuildInfo& ThisBuild();

}  // namespace txscore::service
