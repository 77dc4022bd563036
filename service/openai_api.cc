#include "service/openai_api.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "common/logging.h"
#include "llm/chat_template.h"
#include "llm/generator.h"
#include "llm/tokenizer.h"
#include "pipelines/forensic_stage.h"
#include "pipelines/scoring_pipeline.h"

namespace txscore::service {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// An answer OpenAI's clients understand: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault, or empty
  std::string code;   // e.g. "model_not_found", or empty
};

// Every API error's body passes here: its message and param may quote the caller's text (a model
// name, a field's name), so card numbers in them are redacted as InvalidArgument's are.
Json ErrorJson(const ApiError& e) {
  const char* type = e.status == 429 ? "rate_limit_error" : e.status >= 500 ? "server_error" : "invalid_request_error";
  return {{"error",
           {{"message", RedactCardNumbersIn(e.message)},
            {"type", type},
            {"param", e.param.empty() ? Json(nullptr) : Json(RedactCardNumbersIn(e.param))},
            {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}}}};
}

HttpResponse ErrorResponse(const ApiError& e) {
  return {e.status, "application/json", ErrorJson(e).dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"};
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The LLM stages of a pipeline, by model id (their checkpoint directory's name).
std::vector<pipelines::ForensicStage*> LlmStages(const pipelines::ScoringPipeline& pipeline) {
  std::vector<pipelines::ForensicStage*> stages;
  for (size_t i = 0; i < pipeline.config().graph.size(); ++i) {
    if (pipelines::ForensicStage* stage = pipeline.stage(static_cast<int>(i)).text_generation()) {
      stages.push_back(stage);
    }
  }
  return stages;
}

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(random()),
                static_cast<unsigned long long>(random()));
  return std::string(prefix) + std::string(hex, 24);
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* OpenAiFinishReason(llm::FinishReason reason) {
  switch (reason) {
    case llm::FinishReason::kEos:
    case llm::FinishReason::kStop:
    case llm::FinishReason::kSchemaComplete:
      return "stop";
    case llm::FinishReason::kMaxNewTokens:
    case llm::FinishReason::kDeadline:
      return "length";
    case llm::FinishReason::kCancelled:
      return "abort";
  }
  return "stop";
}

// What a request asks for, read and checked.
struct CompletionRequest {
  std::string model;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  std::optional<int> max_tokens;
  llm::GenerationOptions generation;
  Json prompt;    // completions
  Json messages;  // chat
};

// Fields the API reads; any other is refused (a field silently ignored would change what the
// caller gets without saying so). Fields that only restate a default are accepted.
const std::set<std::string>& KnownFields(bool chat) {
  static const auto with = [](std::set<std::string> own) {
    for (const char* shared :
         {"model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "response_format",
          "n", "logprobs", "frequency_penalty", "presence_penalty", "logit_bias", "user"}) {
      own.insert(shared);
    }
    return own;
  };
  static const std::set<std::string> kCompletions = with({"prompt", "echo", "best_of", "suffix"});
  static const std::set<std::string> kChat =
      with({"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls"});
  return chat ? kChat : kCompletions;
}

// A string field of `object`, or "" when it is absent or not a string.
std::string StringField(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// How deeply `doc` nests (counted without recursion: a hostile body may nest 100,000 deep).
size_t NestingDepth(const Json& doc) {
  size_t deepest = 0;
  std::vector<std::pair<const Json*, size_t>> pending = {{&doc, 1}};
  while (!pending.empty()) {
    const auto [j, depth] = pending.back();
    pending.pop_back();
    deepest = std::max(deepest, depth);
    if (j->is_array() || j->is_object()) {
      for (const Json& item : *j) pending.emplace_back(&item, depth + 1);
    }
  }
  return deepest;
}

constexpr size_t kMaxNesting = 64;

std::optional<ApiError> ParseCompletionRequest(const std::string& body, bool chat, CompletionRequest* out) {
  Json doc;
  try {
    doc = Json::parse(body);
  } catch (const Json::exception& e) {  // not JSON, or a number past double's range (1e999)
    return ApiError{400, std::string("the request body is not JSON: ") + e.what(), "", ""};
  }
  if (!doc.is_object()) return ApiError{400, "the request body must be a JSON object", "", ""};
  if (NestingDepth(doc) > kMaxNesting) {
    return ApiError{400, "the request body nests more than " + std::to_string(kMaxNesting) + " deep", "", ""};
  }
  for (const auto& [key, value] : doc.items()) {
    if (KnownFields(chat).count(key) == 0) {
      return ApiError{400, "unsupported field \"" + key + "\"", key, "unsupported_parameter"};
    }
  }
  const auto field = [&](const char* name) -> const Json* {
    auto it = doc.find(name);
    return it == doc.end() || it->is_null() ? nullptr : &*it;
  };
  CompletionRequest& r = *out;
  r.chat = chat;
  const Json* model = field("model");
  if (model == nullptr || !model->is_string()) return ApiError{400, "model must be a string", "model", ""};
  r.model = model->get<std::string>();

  // What the API does not do is refused, unless the request asks only for the default.
  const auto is_default = [&](const char* name, const Json& fallback) {
    const Json* v = field(name);
    return v == nullptr || *v == fallback;
  };
  if (!is_default("n", 1)) return ApiError{400, "only n = 1 is supported", "n", "unsupported_parameter"};
  if (!is_default("best_of", 1)) return ApiError{400, "only best_of = 1 is supported", "best_of", ""};
  if (!is_default("logprobs", chat ? Json(false) : Json(0)) && !is_default("logprobs", false)) {
    return ApiError{400, "logprobs are not supported", "logprobs", "unsupported_parameter"};
  }
  if (field("top_logprobs") != nullptr) return ApiError{400, "logprobs are not supported", "top_logprobs", ""};
  if (!is_default("echo", false)) return ApiError{400, "echo is not supported", "echo", "unsupported_parameter"};
  if (field("suffix") != nullptr) return ApiError{400, "suffix is not supported", "suffix", "unsupported_parameter"};
  for (const char* penalty : {"frequency_penalty", "presence_penalty"}) {
    if (!is_default(penalty, 0) && !is_default(penalty, 0.0)) {
      return ApiError{400, std::string(penalty) + " is not supported (only 0)", penalty, "unsupported_parameter"};
    }
  }
  if (const Json* bias = field("logit_bias"); bias != nullptr && !(bias->is_object() && bias->empty())) {
    return ApiError{400, "logit_bias is not supported", "logit_bias", "unsupported_parameter"};
  }
  if (const Json* tools = field("tools"); tools != nullptr && !(tools->is_array() && tools->empty())) {
    return ApiError{400, "tool calls are not supported", "tools", "unsupported_parameter"};
  }
  if (!is_default("tool_choice", "none") && !is_default("tool_choice", "auto")) {
    return ApiError{400, "tool calls are not supported", "tool_choice", "unsupported_parameter"};
  }
  if (const Json* user = field("user"); user != nullptr && !user->is_string()) {
    return ApiError{400, "user must be a string", "user", ""};
  }

  if (const Json* stream = field("stream")) {
    if (!stream->is_boolean()) return ApiError{400, "stream must be true or false", "stream", ""};
    r.stream = stream->get<bool>();
  }
  if (const Json* options = field("stream_options")) {
    if (!options->is_object()) return ApiError{400, "stream_options must be an object", "stream_options", ""};
    for (const auto& [key, value] : options->items()) {
      if (key != "include_usage" || !value.is_boolean()) {
        return ApiError{400, "stream_options takes include_usage (true or false)", "stream_options", ""};
      }
      r.include_usage = value.get<bool>();
    }
    if (!r.stream) return ApiError{400, "stream_options needs stream: true", "stream_options", ""};
  }
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (const Json* v = field(name)) {
      if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 1'000'000) {
        return ApiError{400, std::string(name) + " must be a positive integer", name, ""};
      }
      r.max_tokens = static_cast<int>(v->get<int64_t>());
    }
  }
  llm::SamplingOptions& sampling = r.generation.sampling;
  sampling.temperature = 1.0;  // OpenAI's default
  if (const Json* t = field("temperature")) {
    if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 2) {
      return ApiError{400, "temperature must be a number from 0 to 2", "temperature", ""};
    }
    sampling.temperature = t->get<double>();
  }
  if (const Json* p = field("top_p")) {
    if (!p->is_number() || p->get<double>() <= 0 || p->get<double>() > 1) {
      return ApiError{400, "top_p must be a number above 0 and at most 1", "top_p", ""};
    }
    sampling.top_p = p->get<double>();
  }
  if (const Json* seed = field("seed")) {
    if (!seed->is_number_integer()) return ApiError{400, "seed must be an integer", "seed", ""};
    sampling.seed = static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    sampling.seed = std::random_device{}();  // without a seed, as OpenAI: a different draw each time
  }
  if (const Json* stop = field("stop")) {
    if (stop->is_string() && !stop->get<std::string>().empty()) {
      r.generation.stop = {stop->get<std::string>()};
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const Json& s : *stop) {
        if (!s.is_string() || s.get<std::string>().empty()) {
          return ApiError{400, "stop must be a non-empty string or a list of up to 4 non-empty strings", "stop", ""};
        }
        r.generation.stop.push_back(s.get<std::string>());
      }
    } else {
      return ApiError{400, "stop must be a non-empty string or a list of up to 4 non-empty strings", "stop", ""};
    }
  }
  if (const Json* format = field("response_format")) {
    const std::string type = format->is_object() ? StringField(*format, "type") : "";
    if (type == "json_schema") {
      const auto spec = format->find("json_schema");
      if (spec == format->end() || !spec->is_object() || !spec->contains("schema") || !(*spec)["schema"].is_object()) {
        return ApiError{400, "response_format json_schema needs json_schema.schema, an object", "response_format", ""};
      }
      r.generation.schema = (*spec)["schema"].dump();
    } else if (type == "json_object") {
      // Constrained decoding writes the properties a schema requires; "any object" would be {}.
      return ApiError{400, "response_format json_object is not supported: give the object's schema with json_schema",
                      "response_format", "unsupported_parameter"};
    } else if (type != "text") {
      return ApiError{400, "response_format type must be text or json_schema", "response_format", ""};
    }
  }
  if (chat) {
    const Json* messages = field("messages");
    if (messages == nullptr || !messages->is_array() || messages->empty()) {
      return ApiError{400, "messages must be a non-empty list", "messages", ""};
    }
    r.messages = Json::array();
    for (size_t i = 0; i < messages->size(); ++i) {
      const Json& m = (*messages)[i];
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return ApiError{400, at + " must be an object with a role", at, ""};
      }
      std::string role = m["role"].get<std::string>();
      if (role == "developer") role = "system";  // OpenAI's newer name for it
      if (role != "system" && role != "user" && role != "assistant") {
        return ApiError{400,
                        at + ".role must be system, developer, user or assistant (tool messages are not supported)",
                        at + ".role", ""};
      }
      for (const auto& [key, value] : m.items()) {
        if (key != "role" && key != "content" && key != "name") {
          return ApiError{400, at + "." + key + " is not supported", at + "." + key, "unsupported_parameter"};
        }
      }
      // Text parts join with newlines (as vLLM does for templates that take strings).
      std::string content;
      const Json& c = m.contains("content") ? m["content"] : Json(nullptr);
      if (c.is_string()) {
        content = c.get<std::string>();
      } else if (c.is_array()) {
        bool first = true;
        for (const Json& part : c) {
          if (!part.is_object() || StringField(part, "type") != "text" || !part.contains("text") ||
              !part["text"].is_string()) {
            return ApiError{400, at + ".content: only text parts are supported", at + ".content", ""};
          }
          content += (first ? "" : "\n") + part["text"].get<std::string>();
          first = false;
        }
      } else {
        return ApiError{400, at + ".content must be a string or a list of text parts", at + ".content", ""};
      }
      Json message = {{"role", role}, {"content", content}};
      if (m.contains("name")) {  // templates that name speakers read it
        if (!m["name"].is_string()) return ApiError{400, at + ".name must be a string", at + ".name", ""};
        message["name"] = m["name"];
      }
      r.messages.push_back(std::move(message));
    }
  } else {
    const Json* prompt = field("prompt");
    if (prompt != nullptr && prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
      r.prompt = (*prompt)[0];
    } else if (prompt != nullptr &&
               (prompt->is_string() || (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()))) {
      r.prompt = *prompt;
    } else {
      return ApiError{400, "prompt must be a string or a list of token ids (one prompt per request)", "prompt", ""};
    }
  }
  return std::nullopt;
}

// The prompt's token ids: a chat rendered with the model's chat template; a completion's
// text encoded with the tokenizer's special tokens around it, as vLLM does.
std::optional<ApiError> PromptIds(const CompletionRequest& r, const llm::Tokenizer& tokenizer,
                                  std::vector<int32_t>* ids) {
  if (r.chat) {
    if (tokenizer.chat_template() == nullptr) {
      return ApiError{400, "model " + r.model + " has no chat template (tokenizer_config.json): use /v1/completions",
                      "messages", ""};
    }
    Result<std::vector<int32_t>> rendered = llm::ApplyChatTemplate(tokenizer, r.messages);
    if (!rendered.ok())
      return ApiError{400, "the chat template refused the messages: " + rendered.error().message, "messages", ""};
    *ids = std::move(rendered).value();
    return std::nullopt;
  }
  if (r.prompt.is_string()) {
    *ids = tokenizer.Encode(r.prompt.get<std::string>(), {.parse_special = true, .add_special_tokens = true});
    return std::nullopt;
  }
  for (const Json& id : r.prompt) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tokenizer.vocab_size()) {
      return ApiError{400, "prompt token ids must be integers in 0.." + std::to_string(tokenizer.vocab_size() - 1),
                      "prompt", ""};
    }
    ids->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::nullopt;
}

// Where streamed text goes: the responder while the handler runs, nowhere after (the
// generation may outlive the handler by a step).
class StreamSink {
 public:
  explicit StreamSink(AdminResponder* responder) : responder_(responder) {}
  // False once the client has gone (or the handler returned).
  bool Send(std::string event) {
    std::lock_guard<std::mutex> lock(mu_);
    return responder_ != nullptr && responder_->Send(std::move(event));
  }
  bool Alive() {
    std::lock_guard<std::mutex> lock(mu_);
    return responder_ != nullptr && !responder_->client_gone();
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    responder_ = nullptr;
  }

 private:
  std::mutex mu_;
  AdminResponder* responder_;
};

std::string Event(const Json& data) { return "data: " + Dump(data) + "\n\n"; }

}  // namespace

void LlmServingMetrics::Record(const Request& r) {
  const Labels model = {{"model_name", r.model}};
  Labels finished = model;
  finished.emplace_back("finished_reason", r.finished_reason);
  registry_->AddCounter("vllm:request_success_total", "Requests finished, by finish reason.", finished)->Increment();
  const std::vector<double> seconds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                       0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
  if (r.time_to_first_token_s >= 0) {
    registry_->AddHistogram("vllm:time_to_first_token_seconds", "Time from arrival to the first token.", model, seconds)
        ->Observe(r.time_to_first_token_s);
  }
  Histogram* per_token =
      registry_->AddHistogram("vllm:time_per_output_token_seconds", "Time between output tokens.", model, seconds);
  for (double s : r.time_per_output_token_s) per_token->Observe(s);
  registry_->AddHistogram("vllm:e2e_request_latency_seconds", "Time from arrival to the last token.", model, seconds)
      ->Observe(r.e2e_s);
}

OpenAiApi::OpenAiApi(PipelineSource pipelines, MetricsRegistry* registry, OpenAiApiOptions options)
    : pipelines_(std::move(pipelines)), metrics_(registry), options_(options) {}

void OpenAiApi::AddRoutes(std::map<std::string, AdminRoute>* routes) {
  // Generation runs on the engine the forensic stage shares: for the identities given that right.
  AdminRoute models = [this] { return Models(); };
  models.right = RouteRight::kLlmApi;
  (*routes)["/v1/models"] = std::move(models);
  for (const bool chat : {false, true}) {
    AdminRoute route;
    route.post = true;
    route.right = RouteRight::kLlmApi;
    route.max_body_bytes = options_.max_body_bytes;
    route.request_handler = [this, chat](const AdminRequest& request, AdminResponder& responder) {
      Completions(request, responder, chat);
    };
    (*routes)[chat ? "/v1/chat/completions" : "/v1/completions"] = std::move(route);
  }
}

HttpResponse OpenAiApi::Models() const {
  Json data = Json::array();
  if (std::shared_ptr<pipelines::ScoringPipeline> pipeline = pipelines_()) {
    std::set<std::string> seen;
    for (pipelines::ForensicStage* stage : LlmStages(*pipeline)) {
      if (!seen.insert(stage->model_id()).second) continue;
      data.push_back({{"id", stage->model_id()},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "txscore"},
                      {"max_model_len", stage->context_length()}});
    }
  }
  return {200, "application/json", Dump(Json{{"object", "list"}, {"data", data}}) + "\n"};
}

void OpenAiApi::Completions(const AdminRequest& request, AdminResponder& responder, bool chat) {
  const Clock::time_point arrived = Clock::now();
  CompletionRequest r;
  if (std::optional<ApiError> error = ParseCompletionRequest(request.body, chat, &r)) {
    return responder.Respond(ErrorResponse(*error));
  }
  // The pipeline is held for the request: a reload meanwhile frees the old one after it.
  std::shared_ptr<pipelines::ScoringPipeline> pipeline = pipelines_();
  pipelines::ForensicStage* stage = nullptr;
  if (pipeline) {
    for (pipelines::ForensicStage* candidate : LlmStages(*pipeline)) {
      if (candidate->model_id() == r.model) stage = candidate;
    }
  }
  if (stage == nullptr) {
    return responder.Respond(ErrorResponse(
        {404, "The model `" + r.model + "` does not exist (GET /v1/models lists them).", "model", "model_not_found"}));
  }
  std::vector<int32_t> prompt;
  if (std::optional<ApiError> error = PromptIds(r, stage->tokenizer(), &prompt)) {
    return responder.Respond(ErrorResponse(*error));
  }
  if (prompt.empty()) return responder.Respond(ErrorResponse({400, "the prompt is empty", "prompt", ""}));
  const int context = stage->context_length();
  const int max_tokens = r.max_tokens.value_or(
      chat ? std::min(options_.default_max_tokens, std::max(1, context - static_cast<int>(prompt.size()))) : 16);
  if (static_cast<int64_t>(prompt.size()) + max_tokens > context) {
    return responder.Respond(ErrorResponse(
        {400,
         "This model's maximum context length is " + std::to_string(context) + " tokens. However, you requested " +
             std::to_string(prompt.size() + static_cast<size_t>(max_tokens)) + " tokens (" +
             std::to_string(prompt.size()) + " in the prompt, " + std::to_string(max_tokens) + " for the completion).",
         chat ? "messages" : "prompt", "context_length_exceeded"}));
  }
  r.generation.max_new_tokens = max_tokens;

  if (in_flight_.fetch_add(1) >= options_.max_concurrent_requests) {
    in_flight_.fetch_sub(1);
    return responder.Respond(ErrorResponse(
        {429, std::to_string(options_.max_concurrent_requests) + " requests are generating; try again shortly", "",
         "rate_limit_exceeded"}));
  }
  struct InFlight {
    std::atomic<int>* count;
    ~InFlight() { count->fetch_sub(1); }
  } in_flight{&in_flight_};

  const std::string id = RandomId(chat ? "chatcmpl-" : "cmpl-");
  const int64_t created = UnixSeconds();
  const char* object = chat ? (r.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  // By value: streamed pieces may come after this handler has returned.
  const auto chunk = [id, created, object, model = r.model, chat](const std::string& piece, const Json& finish_reason,
                                                                  bool first) {
    Json choice = {{"index", 0}};
    if (chat) {
      Json delta = Json::object();
      if (first) delta["role"] = "assistant";
      if (!piece.empty() || first) delta["content"] = piece;
      choice["delta"] = delta;
      choice["logprobs"] = nullptr;
    } else {
      choice["text"] = piece;
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = finish_reason;
    return Json{{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", {choice}}};
  };

  auto sink = std::make_shared<StreamSink>(&responder);
  if (r.stream) {
    responder.Begin("text/event-stream");
    if (chat) sink->Send(Event(chunk("", nullptr, /*first=*/true)));
    r.generation.on_text = [sink, chunk](const std::string& piece) {
      return sink->Send(Event(chunk(piece, nullptr, false)));
    };
  } else {
    r.generation.on_text = [sink](const std::string&) { return sink->Alive(); };  // stops if the client goes
  }
  const bool has_schema = !r.generation.schema.empty();
  Result<llm::GenerationResult> generated =
      stage->Generate(prompt, std::move(r.generation), arrived + options_.request_timeout);
  sink->Detach();

  LlmServingMetrics::Request record;
  record.model = r.model;
  record.e2e_s = std::chrono::duration<double>(Clock::now() - arrived).count();
  if (!generated.ok()) {
    // A schema the constraint cannot compile, or a budget too small for it, is the caller's:
    // refused before it ran (vLLM counts no request for it either). The rest were aborted.
    const ErrorCode code = generated.error().code;
    const bool callers = code == ErrorCode::kInvalidArgument || code == ErrorCode::kFailedPrecondition;
    if (!callers) {
      record.finished_reason = "abort";
      metrics_.Record(record);
    }
    const ApiError error{callers                                ? 400
                         : code == ErrorCode::kDeadlineExceeded ? 504
                                                                : 503,
                         generated.error().message, callers && has_schema ? "response_format" : "", ""};
    if (r.stream) {
      responder.Send(Event(ErrorJson(error)));
      responder.Send("data: [DONE]\n\n");
      return;
    }
    return responder.Respond(ErrorResponse(error));
  }
  const llm::GenerationResult& g = *generated;
  const char* finish_reason = OpenAiFinishReason(g.finish_reason);
  record.finished_reason = finish_reason;
  if (!g.generated_ids.empty() && g.first_token_at != Clock::time_point{}) {
    record.time_to_first_token_s = std::chrono::duration<double>(g.first_token_at - arrived).count();
  }
  for (int64_t us : g.token_us) record.time_per_output_token_s.push_back(static_cast<double>(us) / 1e6);
  metrics_.Record(record);
  const Json usage = {{"prompt_tokens", prompt.size()},
                      {"completion_tokens", g.generated_ids.size()},
                      {"total_tokens", prompt.size() + g.generated_ids.size()}};
  if (r.stream) {
    responder.Send(Event(chunk("", finish_reason, false)));
    if (r.include_usage) {
      responder.Send(Event({{"id", id},
                            {"object", object},
                            {"created", created},
                            {"model", r.model},
                            {"choices", Json::array()},
                            {"usage", usage}}));
    }
    responder.Send("data: [DONE]\n\n");
    return;
  }
  Json choice = {{"index", 0}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", g.text}, {"refusal", nullptr}};
  } else {
    choice["text"] = g.text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  const Json reply = {{"id", id},         {"object", object},    {"created", created},
                      {"model", r.model}, {"choices", {choice}}, {"usage", usage}};
  responder.Respond({200, "application/json", Dump(reply) + "\n"});
}

}  // namespace txscore::service
