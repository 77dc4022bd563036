// Background threads: work that must not compete with requests for the CPU.
#pragma once

#include "common/result.h"

namespace txscore {

// Puts the calling thread in the OS's lowest scheduling class (Linux SCHED_IDLE): it runs only
// on a core no normal thread wants. Irreversible for an unprivileged process; threads it starts
// afterwards inherit it.
Status LowerThisThreadPriority();

}  // namespace txscore
