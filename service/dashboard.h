// The operators' dashboard on the admin port (docs/operations.md, "Dashboard"):
//
//   GET /                the page (service/dashboard/index.html)
//   GET /dashboard/...   its script and style, and the chart library (uPlot, from npm)
//   GET /api/dashboard   what the page draws, as JSON; the page polls it once a second
//
// Every file the page loads is compiled into the binary at build time (cmake/embed_files.cmake:
// service/dashboard/ and build/dashboard-npm's uplot), so the page needs nothing but this port.
// The JSON holds the pipeline DAG with each stage's placement and why, cumulative request and
// per-stage counts and latency histograms (the page turns two readings into rates, latency
// percentiles and device busy time), host fallbacks, the recent decisions (card tokens only:
// never a card number, which the service does not keep), the reload history and the claims
// jobs' progress. Same access as /metrics: whoever the admin port lets in.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "pipelines/scoring_pipeline.h"
#include "service/admin_server.h"
#include "service/metrics.h"
#include "service/recent_decisions.h"

namespace txscore::service {

// One file the dashboard serves, compiled in (the build generates DashboardAssets()).
struct DashboardAsset {
  std::string_view path;          // "/" or "/dashboard/<file>"
  std::string_view content_type;  // with its charset
  std::string_view body;
};
const std::vector<DashboardAsset>& DashboardAssets();

// Where /api/dashboard reads from. Every member may be null (that part is left out).
struct DashboardSources {
  std::function<std::shared_ptr<pipelines::ScoringPipeline>()> pipeline;  // the one serving
  const MetricsRegistry* metrics = nullptr;
  const RecentDecisions* decisions = nullptr;
  std::function<std::string()> phase;              // starting, serving, draining, stopped
  std::function<nlohmann::json()> reload_history;  // oldest first
  std::function<nlohmann::json()> jobs;            // the claims jobs, as /api/dashboard lists them
  std::function<nlohmann::json()> shard;           // a sharded server's shard and set; null JSON: not sharded
};

// The JSON /api/dashboard answers (documented in docs/operations.md). Recent decisions name
// their card token, and jobs and reloads their detail (file paths), only `with_card_tokens` (an
// operator asked): a monitoring identity sees "(operators only)" there, since a token lets its
// holder act on the card's history.
inline constexpr char kTokenForOperatorsOnly[] = "(operators only)";
nlohmann::json DashboardState(const DashboardSources& sources, int64_t now_ms, bool with_card_tokens);

// The pipeline's stages as the page draws them: name, kind, after, when, required, and for a
// placed stage the placement asked for, the device chosen and why.
nlohmann::json PipelineGraphJson(const pipelines::ScoringPipeline& pipeline);

// Adds GET /, GET /dashboard/ (a prefix: the embedded files; 404 for others) and
// GET /api/dashboard to `routes`.
void AddDashboardRoutes(DashboardSources sources, std::map<std::string, AdminRoute>* routes);

}  // namespace txscore::service
