// Keeping key material out of core dumps. A core dump of txscore would hold its keyset (card,
// claimant and audit keys), decrypted requests and card state: by default the process is made
// non-dumpable (PR_SET_DUMPABLE 0: no core file, and no ptrace or /proc/PID/mem by other
// processes of the same user) and its core-file limit set to 0. `security.allow_core_dumps:
// true` leaves both as the process found them, for debugging on a machine where that is safe.
#pragma once

#include "common/result.h"

namespace txscore {

// When !allow_core_dumps: PR_SET_DUMPABLE 0 and RLIMIT_CORE 0 (soft and hard) for this process
// (inherited by its children). An error when the kernel refuses either.
Status KeepSecretsOutOfCoreDumps(bool allow_core_dumps);

}  // namespace txscore
