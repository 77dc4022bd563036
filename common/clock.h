// The clock deadlines are measured with. A deadline is a time point of this clock, so every
// component that compares against one reads the same clock: std::chrono::steady_clock in the
// service, a test's own (one that steps, or jumps ahead) through PipelineRuntime::clock, which
// the pipeline hands to every stage, batcher and generator that checks a deadline.
// Durations that are measured rather than compared with a deadline (stage timings, a batcher's
// collection window) use the steady clock itself, as do the Thrift transport's connection
// timeouts (service/rpc_server.cc: frame and idle), which guard sockets, not scoring work.
#pragma once

#include <chrono>
#include <functional>

namespace txscore {

using DeadlineClock = std::function<std::chrono::steady_clock::time_point()>;

inline DeadlineClock SteadyDeadlineClock() {
  return [] { return std::chrono::steady_clock::now(); };
}

// How long `clock` says is left until `deadline` (zero once it has passed): the real time a
// caller blocks for when it waits for that deadline.
inline std::chrono::steady_clock::duration TimeLeft(const DeadlineClock& clock,
                                                    std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - clock();
  return left > std::chrono::steady_clock::duration::zero() ? left : std::chrono::steady_clock::duration::zero();
}

}  // namespace txscore
