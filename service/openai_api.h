// The OpenAI-compatible API on the admin port (HTTPS and client identity as for every admin
// route), served by the LLM stages of the transaction pipeline in force:
//   GET  /v1/models              the models: one per llm_findings stage, named by its
//                                checkpoint directory (as findings name model_id)
//   POST /v1/completions         a prompt (text, or token ids) -> text
//   POST /v1/chat/completions    messages, rendered with the model's chat template -> a reply
// Both POSTs answer whole or, with "stream": true, as server-sent events (data: {chunk} lines,
// then data: [DONE]). They take max_tokens (chat: also max_completion_tokens), temperature,
// top_p, seed, stop (a string or up to 4), stream_options.include_usage, and response_format
// {"type": "json_schema", "json_schema": {"schema": {...}}}: the reply is constrained to the
// schema (llm/json_constraint.h; a keyword it cannot enforce is refused, as is
// {"type": "json_object"}, which has no schema). Every reply counts its tokens in
// `usage`. What the API does not do (n > 1, logprobs, echo, tool calls in replies, images) is
// refused with a 400 that names the field, never ignored.
//
// Requests join the same dynamic batcher as the pipeline's own LLM work, after synchronous
// scoring requests and before batch jobs (pipelines/dynamic_batcher.h, BatchPriority::kApi).
// Errors answer as OpenAI's do: {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "service/admin_server.h"
#include "service/metrics.h"

namespace txscore::pipelines {
class ForensicStage;
class ScoringPipeline;
}  // namespace txscore::pipelines

namespace txscore::service {

struct OpenAiApiOptions {
  // Default: 120 s. How long one request may take from arrival to its last token; a
  // generation still running then ends with finish_reason "length".
  std::chrono::milliseconds request_timeout{120000};
  // Default: 256. max_tokens when a request gives none (completions: 16, as OpenAI's).
  int default_max_tokens = 256;
  // Default: 32. Requests generating at once; one more is answered 429.
  int max_concurrent_requests = 32;
  // Default: 1 MiB. The largest request body (a long conversation).
  size_t max_body_bytes = 1 << 20;
};

// The API's request metrics under the names vLLM gives their equivalents (so dashboards built
// for vLLM read them), labelled model_name: time to first token, per output token, end to
// end, and finished requests by reason. The token counters and the running, waiting and
// KV-cache gauges count all the LLM stage's work (service/scoring_server.cc). See
// docs/operations.md.
class LlmServingMetrics {
 public:
  explicit LlmServingMetrics(MetricsRegistry* registry) : registry_(registry) {}
  struct Request {
    std::string model;
    double time_to_first_token_s = -1;  // < 0: no token came
    std::vector<double> time_per_output_token_s;
    double e2e_s = 0;
    std::string finished_reason;  // "stop", "length" or "abort"
  };
  void Record(const Request& request);

 private:
  MetricsRegistry* registry_;
};

class OpenAiApi {
 public:
  // The pipeline serving now; called once per request (a reload changes it).
  using PipelineSource = std::function<std::shared_ptr<pipelines::ScoringPipeline>()>;

  // `registry`: where the LLM serving metrics go (must outlive this).
  OpenAiApi(PipelineSource pipelines, MetricsRegistry* registry, OpenAiApiOptions options = {});

  // Adds /v1/models, /v1/completions and /v1/chat/completions.
  void AddRoutes(std::map<std::string, AdminRoute>* routes);

  // Requests generating now (tests and metrics).
  int in_flight() const { return in_flight_.load(); }

 private:
  HttpResponse Models() const;
  void Completions(const AdminRequest& request, AdminResponder& responder, bool chat);

  PipelineSource pipelines_;
  LlmServingMetrics metrics_;
  OpenAiApiOptions options_;
  std::atomic<int> in_flight_{0};
};

}  // namespace txscore::service
