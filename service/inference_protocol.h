// The health and metadata part of the Open Inference Protocol (KServe v2, also Triton's and
// Seldon's), on the admin port beside /healthz and /readyz, so that a platform's probes and
// model registries read txscore as they read any inference server:
//
//   GET /v2/health/live                    200 while the process answers (as /healthz)
//   GET /v2/health/ready                   200 when /readyz would be; 400 otherwise
//   GET /v2                                {"name": "txscore", "version", "extensions": []}
//   GET /v2/models/{name}                  {"name", "versions", "platform", "inputs", "outputs"}
//   GET /v2/models/{name}/ready            200 when the server is ready; 400 otherwise
//   .../versions/{version}, .../versions/{version}/ready: the same, for that version only
//
// A model is a stage of the transaction pipeline in force that has one (an xgboost stage, an
// llm_findings stage), named by the stage's name; its one version is the model's content
// version (what /readyz shows). As the protocol says, health answers have empty bodies and
// say false with a 4xx status (400); an unknown model or version is a 404 with
// {"error": "..."}. Inference (POST .../infer) is not offered: transactions are scored over
// Thrift, and the LLM over the OpenAI-compatible API.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "service/admin_server.h"

namespace txscore::pipelines {
class ScoringPipeline;
}

namespace txscore::service {

struct InferenceProtocolSource {
  std::function<bool()> ready;                                            // what /readyz says
  std::function<std::shared_ptr<pipelines::ScoringPipeline>()> pipeline;  // the one in force
};

// Adds the routes above.
void AddInferenceProtocolRoutes(InferenceProtocolSource source, std::map<std::string, AdminRoute>* routes);

}  // namespace txscore::service
