#include "common/core_dumps.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace txscore {

Status KeepSecretsOutOfCoreDumps(bool allow_core_dumps) {
  if (allow_core_dumps) return Status::Ok();
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return Internal(std::string("cannot make the process non-dumpable (prctl PR_SET_DUMPABLE): ") +
                    std::strerror(errno));
  }
  const rlimit none{0, 0};
  if (::setrlimit(RLIMIT_CORE, &none) != 0) {
    return Internal(std::string("cannot set the core file size limit to 0: ") + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace txscore
