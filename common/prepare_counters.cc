#include "common/prepare_counters.h"

namespace txscore {
namespace {

std::atomic<uint64_t> g_model_builds{0};
std::atomic<uint64_t> g_graph_builds{0};
std::atomic<uint64_t> g_weight_bytes_moved{0};

}  // namespace

void CountModelBuild() { g_model_builds.fetch_add(1, std::memory_order_relaxed); }
void CountGraphBuild() { g_graph_builds.fetch_add(1, std::memory_order_relaxed); }
void CountWeightBytesMoved(uint64_t bytes) { g_weight_bytes_moved.fetch_add(bytes, std::memory_order_relaxed); }

PrepareSnapshot PrepareCountersNow() {
  return {g_model_builds.load(std::memory_order_relaxed), g_graph_builds.load(std::memory_order_relaxed),
          g_weight_bytes_moved.load(std::memory_order_relaxed)};
}

}  // namespace txscore
