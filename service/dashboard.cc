#include "service/dashboard.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "service/build_info.h"

namespace txscore::service {
namespace {

using Json = nlohmann::json;

// The metric families the page reads: requests and their latency, each stage's latency,
// decisions, and stages that moved to their next device.
const std::set<std::string>& DashboardFamilies() {
  static const std::set<std::string> families = {"txscore_requests_total",         "txscore_request_duration_seconds",
                                                 "txscore_stage_duration_seconds", "txscore_decisions_total",
                                                 "txscore_device_fallbacks_total", "txscore_shard_forwards_total"};
  return families;
}

std::string LabelValue(const Labels& labels, const std::string& name) {
  for (const auto& [key, value] : labels) {
    if (key == name) return value;
  }
  return "";
}

Json HistogramJson(const MetricsRegistry::SeriesValue& series) {
  Json buckets = Json::array();
  for (size_t i = 0; i < series.upper_bounds.size(); ++i) {
    buckets.push_back(Json::array({series.upper_bounds[i], series.cumulative[i]}));
  }
  return {{"count", series.cumulative.empty() ? uint64_t{0} : series.cumulative.back()},
          {"seconds_sum", series.sum},
          {"buckets", std::move(buckets)}};
}

// Requests (both methods added up), per-stage histograms, decisions and fallbacks.
void AddMetrics(const MetricsRegistry& metrics, Json* state) {
  Json requests = {{"ok", 0}, {"invalid", 0}, {"error", 0}};
  Json request_latency;
  Json stages = Json::object();
  Json decisions = Json::object();
  Json fallbacks = Json::object();
  Json forwards = Json::object();
  for (const MetricsRegistry::SeriesValue& series : metrics.Read(DashboardFamilies())) {
    if (series.name == "txscore_requests_total") {
      const std::string outcome = LabelValue(series.labels, "outcome");
      requests[outcome] = requests.value(outcome, 0.0) + series.value;
    } else if (series.name == "txscore_request_duration_seconds") {
      Json one = HistogramJson(series);
      if (request_latency.is_null()) {
        request_latency = std::move(one);
        continue;
      }
      // Both methods share their buckets: add them up.
      request_latency["count"] = request_latency["count"].get<uint64_t>() + one["count"].get<uint64_t>();
      request_latency["seconds_sum"] = request_latency["seconds_sum"].get<double>() + one["seconds_sum"].get<double>();
      for (size_t i = 0; i < one["buckets"].size(); ++i) {
        request_latency["buckets"][i][1] =
            request_latency["buckets"][i][1].get<uint64_t>() + one["buckets"][i][1].get<uint64_t>();
      }
    } else if (series.name == "txscore_stage_duration_seconds") {
      stages[LabelValue(series.labels, "stage")] = HistogramJson(series);
    } else if (series.name == "txscore_decisions_total") {
      decisions[LabelValue(series.labels, "decision")] = series.value;
    } else if (series.name == "txscore_device_fallbacks_total") {
      fallbacks[LabelValue(series.labels, "stage")] = series.value;
    } else if (series.name == "txscore_shard_forwards_total") {
      forwards[LabelValue(series.labels, "shard")][LabelValue(series.labels, "outcome")] = series.value;
    }
  }
  (*state)["requests"] = std::move(requests);
  (*state)["request_latency"] = std::move(request_latency);
  (*state)["stage_latency"] = std::move(stages);
  (*state)["decisions"] = std::move(decisions);
  (*state)["device_fallbacks"] = std::move(fallbacks);
  (*state)["shard_forwards"] = std::move(forwards);
}

Json DecisionsJson(const RecentDecisions& decisions, bool with_card_tokens) {
  Json list = Json::array();
  for (const RecentDecisions::Entry& entry : decisions.Newest()) {
    list.push_back({{"time_ms", entry.time_ms},
                    {"request_id", entry.request_id},
                    {"card_token", with_card_tokens ? entry.card_token : kTokenForOperatorsOnly},
                    {"score", entry.score},
                    {"decision", entry.decision},
                    {"reasons", entry.reasons},
                    {"rule_hits", entry.rule_hits},
                    {"findings", entry.findings},
                    // Free text an LLM wrote about the case: for operators, as card tokens are.
                    {"findings_summary", with_card_tokens ? entry.findings_summary : kTokenForOperatorsOnly},
                    {"pipeline_version", entry.pipeline_version}});
  }
  return list;
}

HttpResponse AssetAnswer(const DashboardAsset& asset) {
  HttpResponse answer{200, std::string(asset.content_type), std::string(asset.body)};
  // The page may load only what this port serves: a script or style from anywhere else is
  // refused by the browser itself.
  answer.headers = {{"Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"},
                    {"X-Content-Type-Options", "nosniff"},
                    {"Cache-Control", "no-cache"}};
  return answer;
}

}  // namespace

Json PipelineGraphJson(const pipelines::ScoringPipeline& pipeline) {
  const pipelines::PipelineConfig& config = pipeline.config();
  Json stages = Json::array();
  for (size_t i = 0; i < config.graph.size(); ++i) {
    const pipelines::GraphStage& stage = config.graph.stage(static_cast<int>(i));
    Json after = Json::array();
    for (int before : stage.after) after.push_back(config.graph.stage(before).name);
    Json entry = {{"name", stage.name},
                  {"kind", stage.kind},
                  {"after", std::move(after)},
                  {"required", stage.required},
                  {"when", stage.when ? Json(stage.when->text()) : Json(nullptr)},
                  {"describe", pipeline.stage(static_cast<int>(i)).Describe()}};
    if (const accelerator::Placement* placed = pipeline.plan().Find(stage.name)) {
      entry["placement"] = placed->requested;
      entry["device"] = placed->device;
      entry["emulated"] = placed->emulated;
      entry["why"] = placed->reason;
      Json candidates = Json::array();
      for (const accelerator::Candidate& candidate : placed->candidates) {
        Json c = {{"device", candidate.device}, {"able", candidate.able}};
        if (candidate.able) {
          c["predicted_us"] = candidate.predicted_us;
        } else {
          c["why_not"] = candidate.why_not;
        }
        candidates.push_back(std::move(c));
      }
      entry["candidates"] = std::move(candidates);
      entry["fallback"] = placed->fallback;
    } else if (pipeline.stage(static_cast<int>(i)).model()) {
      entry["placement"] = nullptr;
      entry["device"] = "cpu";
      entry["why"] = "not placed: this process looked for no devices, so the model runs on the CPU";
    } else {
      entry["placement"] = nullptr;
      entry["device"] = "host";
      entry["why"] = "no model to place: runs on the request's own thread";
    }
    stages.push_back(std::move(entry));
  }
  return {{"name", config.name},
          {"version", config.version},
          {"model_id", pipeline.model_id()},
          {"model_version", pipeline.model_version()},
          {"timing_slots", pipeline.TimingSlotNames()},
          {"stages", std::move(stages)}};
}

Json DashboardState(const DashboardSources& sources, int64_t now_ms, bool with_card_tokens) {
  const BuildInfo& build = ThisBuild();
  Json state = {{"time_ms", now_ms}, {"build", {{"version", build.version}, {"commit", build.commit}}}};
  if (sources.phase) state["phase"] = sources.phase();
  if (sources.pipeline) {
    const std::shared_ptr<pipelines::ScoringPipeline> pipeline = sources.pipeline();
    state["pipeline"] = pipeline ? PipelineGraphJson(*pipeline) : Json(nullptr);
  }
  if (sources.metrics != nullptr) AddMetrics(*sources.metrics, &state);
  if (sources.decisions != nullptr) state["recent_decisions"] = DecisionsJson(*sources.decisions, with_card_tokens);
  if (sources.reload_history) state["reloads"] = sources.reload_history();
  if (sources.jobs) state["jobs"] = sources.jobs();
  // What names files (a job's or a reload's detail) is for operators too, as claimsJobStatus is.
  for (const char* list : {"reloads", "jobs"}) {
    if (with_card_tokens || !state.contains(list)) continue;
    for (Json& entry : state[list]) {
      if (entry.is_object() && entry.contains("detail")) entry["detail"] = kTokenForOperatorsOnly;
    }
  }
  if (sources.shard) state["shard"] = sources.shard();
  return state;
}

void AddDashboardRoutes(DashboardSources sources, std::map<std::string, AdminRoute>* routes) {
  auto shared = std::make_shared<const DashboardSources>(std::move(sources));
  for (const DashboardAsset& asset : DashboardAssets()) {
    if (asset.path == "/") (*routes)["/"] = [&asset] { return AssetAnswer(asset); };
  }
  AdminRoute files;
  files.path_handler = [](const Caller&, const std::string& path) {
    for (const DashboardAsset& asset : DashboardAssets()) {
      if (asset.path == path) return AssetAnswer(asset);
    }
    return HttpResponse{404, "application/json",
                        Json{{"error", "no such dashboard file"}, {"path", RedactCardNumbersIn(path)}}.dump() + "\n"};
  };
  (*routes)["/dashboard/"] = std::move(files);
  (*routes)["/api/dashboard"] = [shared](const Caller& caller) {
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    HttpResponse answer{200, "application/json", DashboardState(*shared, now_ms, caller.is_operator).dump() + "\n"};
    answer.headers = {{"Cache-Control", "no-store"}};
    return answer;
  };
}

}  // namespace txscore::service
