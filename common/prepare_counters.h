// "Prepare once, run many": work that belongs at start-up (building a model, compiling a
// decoding constraint, moving weights to a device) is counted here by the components that do
// it. The service exports how much of it happened after it started serving; on a healthy
// request path that stays zero (txscore_request_path_*_total in /metrics, and a test).
#pragma once

#include <atomic>
#include <cstdint>

namespace txscore {

struct PrepareSnapshot {
  uint64_t model_builds = 0;        // models loaded or constructed (XGBoost, decoders)
  uint64_t graph_builds = 0;        // decoding constraints compiled for a vocabulary and schema
  uint64_t weight_bytes_moved = 0;  // weights copied onto a device

  PrepareSnapshot operator+(const PrepareSnapshot& more) const {
    return {model_builds + more.model_builds, graph_builds + more.graph_builds,
            weight_bytes_moved + more.weight_bytes_moved};
  }
  PrepareSnapshot operator-(const PrepareSnapshot& earlier) const {
    return {model_builds - earlier.model_builds, graph_builds - earlier.graph_builds,
            weight_bytes_moved - earlier.weight_bytes_moved};
  }
};

// Process-wide counters; thread-safe.
void CountModelBuild();
void CountGraphBuild();
void CountWeightBytesMoved(uint64_t bytes);
PrepareSnapshot PrepareCountersNow();

}  // namespace txscore
