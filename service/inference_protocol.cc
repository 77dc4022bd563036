#include "service/inference_protocol.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "pipelines/scoring_pipeline.h"
#include "service/build_info.h"

namespace txscore::service {
namespace {

using Json = nlohmann::json;

HttpResponse Health(bool yes) { return {yes ? 200 : 400, "text/plain; charset=utf-8", ""}; }

HttpResponse JsonAnswer(int status, const Json& body) { return {status, "application/json", body.dump() + "\n"}; }

HttpResponse NotFound(const std::string& message) { return JsonAnswer(404, {{"error", message}}); }

Json Tensors(const std::vector<pipelines::TensorSpec>& tensors) {
  Json list = Json::array();
  for (const pipelines::TensorSpec& t : tensors) {
    list.push_back({{"name", t.name}, {"datatype", t.datatype}, {"shape", t.shape}});
  }
  return list;
}

// "/v2/models/NAME[/versions/VERSION][/ready]", split: false when the path is none of these.
struct ModelPath {
  std::string name;
  std::optional<std::string> version;
  bool ready = false;
};
std::optional<ModelPath> ParseModelPath(const std::string& path) {
  static const std::string kPrefix = "/v2/models/";
  std::vector<std::string> parts;
  for (size_t start = kPrefix.size();;) {
    const size_t end = path.find('/', start);
    parts.push_back(path.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  ModelPath model;
  if (!parts.empty() && parts.back() == "ready") {
    model.ready = true;
    parts.pop_back();
  }
  if (parts.size() == 3 && parts[1] == "versions") {
    model.version = parts[2];
  } else if (parts.size() != 1) {
    return std::nullopt;
  }
  model.name = parts[0];
  if (model.name.empty() || (model.version && model.version->empty())) return std::nullopt;
  return model;
}

HttpResponse Model(const InferenceProtocolSource& source, const std::string& path) {
  const std::optional<ModelPath> request = ParseModelPath(path);
  if (!request) {
    return NotFound("no such path: use /v2/models/{name}[/versions/{version}][/ready]");
  }
  const std::shared_ptr<pipelines::ScoringPipeline> pipeline = source.pipeline();
  const pipelines::PreparedStage* stage = pipeline ? pipeline->FindStage(request->name) : nullptr;
  const std::optional<pipelines::ModelVersion> model = stage ? stage->model() : std::nullopt;
  if (!model) return NotFound("no model named " + request->name + " (GET /v2/models/{stage name} of a model stage)");
  if (request->version && *request->version != model->version) {
    return NotFound("model " + request->name + " has no version " + *request->version + " (it serves " +
                    model->version + ")");
  }
  if (request->ready) return Health(source.ready());
  const pipelines::ModelSignature signature = stage->signature().value_or(pipelines::ModelSignature{});
  return JsonAnswer(200, {{"name", request->name},
                          {"versions", {model->version}},
                          {"platform", signature.platform},
                          {"inputs", Tensors(signature.inputs)},
                          {"outputs", Tensors(signature.outputs)},
                          {"parameters", {{"model_id", model->id}}}});
}

}  // namespace

void AddInferenceProtocolRoutes(InferenceProtocolSource source, std::map<std::string, AdminRoute>* routes) {
  auto shared = std::make_shared<const InferenceProtocolSource>(std::move(source));
  (*routes)["/v2/health/live"] = [] { return Health(true); };
  (*routes)["/v2/health/ready"] = [shared] { return Health(shared->ready()); };
  (*routes)["/v2"] = [] {
    return JsonAnswer(200, {{"name", "txscore"}, {"version", ThisBuild().version}, {"extensions", Json::array()}});
  };
  AdminRoute models;
  models.path_handler = [shared](const Caller&, const std::string& path) { return Model(*shared, path); };
  (*routes)["/v2/models/"] = std::move(models);
}

}  // namespace txscore::service
