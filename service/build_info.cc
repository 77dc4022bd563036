#include "service/build_info.h"

#include "build_commit.h"  // generated into the build tree (cmake/build_commit.cmake)

namespace txscore::service {

const BuildInfo& ThisBuild() {
  static const BuildInfo info{TXSCORE_VERSION, TXSCORE_COMMIT, TXSCORE_COMPILER};
  return info;
}

}  // namespace txscore::service
