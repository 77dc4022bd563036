#include "common/thread_priority.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

namespace txscore {

Status LowerThisThreadPriority() {
  sched_param param{};
  param.sched_priority = 0;
  const int rc = pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
  if (rc != 0) return Internal(std::string("cannot lower the thread's priority: ") + std::strerror(rc));
  return Status::Ok();
}

}  // namespace txscore
