#include "common/core_dumps.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace txscore {
namespace {

// Runs KeepSecretsOutOfCoreDumps(allow) in a child process (it changes the process for good) and
// returns what the child then saw, as its exit code: 10 * dumpable + (core limit is 0 ? 1 : 0).
int ChildStateAfter(bool allow) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    rlimit some{4096, 4096};
    ::setrlimit(RLIMIT_CORE, &some);  // a limit above 0 to begin with
    if (!KeepSecretsOutOfCoreDumps(allow).ok()) ::_exit(99);
    rlimit core{};
    ::getrlimit(RLIMIT_CORE, &core);
    const int dumpable = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    ::_exit(10 * dumpable + (core.rlim_cur == 0 && core.rlim_max == 0 ? 1 : 0));
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(KeepSecretsOutOfCoreDumps, MakesTheProcessNonDumpableWithNoCoreFileByDefault) {
  EXPECT_EQ(ChildStateAfter(false), 1);  // not dumpable, core limit 0
  EXPECT_EQ(ChildStateAfter(true), 10);  // allowed: dumpable, the limit as it was
}

}  // namespace
}  // namespace txscore
