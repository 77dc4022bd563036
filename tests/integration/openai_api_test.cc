// The OpenAI-compatible endpoints of a running server (service/openai_api.h): a transaction
// pipeline with an llm_findings stage on a tiny generated Qwen3 checkpoint (random weights,
// real libtorch decoder, CPU), called over plain HTTP on the admin port. The texts of a random
// model are meaningless, so the checks compare the API with itself and with the generator:
// streamed pieces join up to the whole reply, a stop string cuts where the text had it, a
// schema's reply parses, counts add up, and every refusal names its field.
#include "service/openai_api.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "llm/chat_template.h"
#include "llm/checkpoint_maker.h"
#include "llm/decoder.h"
#include "llm/tokenizer.h"
#include "service/admin_server.h"
#include "service/scoring_server.h"
#include "tests/rpc_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

using Json = nlohmann::json;

class OpenAiApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(llm::MakeCheckpoint({.family = "qwen3"}, dir_->file("llm-chat")).ok());
    ASSERT_TRUE(
        llm::MakeCheckpoint({.family = "qwen3", .seed = 2, .chat_template = false}, dir_->file("llm-base")).ok());
    std::string yaml = testing::ReadFile(testing::WriteTestPipeline(*dir_));
    yaml +=
        "  - {name: forensic, kind: llm_findings, after: decision, model: llm-chat, placement: cpu}\n"
        "  - {name: second, kind: llm_findings, after: decision, model: llm-base, placement: cpu}\n";
    testing::WriteFile(dir_->file("pipeline.yaml"), yaml);
    auto settings = LoadServiceSettings(testing::TestSettingsPath(*dir_));
    ASSERT_TRUE(settings.ok()) << settings.error().ToString();
    auto config = pipelines::LoadPipelineConfig(settings->pipeline);
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    pipelines::PipelineRuntime runtime;
    runtime.load_decoder = llm::Decoder::Load;
    auto server = ScoringServer::Create(*settings, *config, runtime);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = server->release();
    server_->Start();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }

  // One request on a fresh connection; the whole answer as received.
  static std::string Exchange(const std::string& method, const std::string& target, const std::string& body = "",
                              int port = 0, const std::string& version = "HTTP/1.1") {
    const int fd = testing::RawConnect(port != 0 ? port : server_->admin_port());
    const std::string request = method + " " + target + " " + version +
                                "\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                "Content-Length: " +
                                std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string received;
    char buf[8192];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) received.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return received;
  }
  static int Status(const std::string& response) {
    return response.rfind("HTTP/1.", 0) == 0 ? std::stoi(response.substr(9, 3)) : -1;
  }
  // The body after the headers; empty when the answer has none (a connection closed unanswered).
  static std::string Body(const std::string& response) {
    const size_t end = response.find("\r\n\r\n");
    return end == std::string::npos ? std::string() : response.substr(end + 4);
  }
  // A whole (not streamed) answer: status and JSON body.
  static std::pair<int, Json> Call(const std::string& target, const Json& body) {
    const std::string response = Exchange("POST", target, body.dump());
    return {Status(response), Json::parse(Body(response), nullptr, false)};
  }
  // A streamed answer: the JSON of each data: event (the last one, "[DONE]", as a string).
  static std::vector<Json> Stream(const std::string& target, const Json& body) {
    const std::string response = Exchange("POST", target, body.dump());
    EXPECT_EQ(Status(response), 200) << response.substr(0, 400);
    EXPECT_NE(response.find("Content-Type: text/event-stream"), std::string::npos);
    std::string payload;  // de-chunked
    const std::string chunked = Body(response);
    for (size_t pos = 0;;) {
      const size_t line_end = chunked.find("\r\n", pos);
      if (line_end == std::string::npos) break;
      const size_t size = std::stoul(chunked.substr(pos, line_end - pos), nullptr, 16);
      if (size == 0) break;
      payload += chunked.substr(line_end + 2, size);
      pos = line_end + 2 + size + 2;
    }
    std::vector<Json> events;
    for (size_t pos = 0; pos < payload.size();) {
      const size_t end = payload.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos) << payload;
      if (end == std::string::npos) break;
      const std::string event = payload.substr(pos, end - pos);
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      const std::string data = event.substr(6);
      events.push_back(data == "[DONE]" ? Json(data) : Json::parse(data));
      pos = end + 2;
    }
    return events;
  }
  static Json Chat(const std::string& content, Json extra = Json::object()) {
    Json body = {
        {"model", "llm-chat"},
        {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", content}}}},
        {"temperature", 0},
        {"max_tokens", 24}};
    body.update(extra);
    return body;
  }

  static testing::TempDir* dir_;
  static ScoringServer* server_;
};
testing::TempDir* OpenAiApiTest::dir_ = nullptr;
ScoringServer* OpenAiApiTest::server_ = nullptr;

TEST_F(OpenAiApiTest, ModelsListsEachLlmStagesCheckpoint) {
  const std::string response = Exchange("GET", "/v1/models");
  ASSERT_EQ(Status(response), 200) << response;
  const Json models = Json::parse(Body(response));
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 2u) << models;
  EXPECT_EQ(models["data"][0]["id"], "llm-chat");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["owned_by"], "txscore");
  EXPECT_EQ(models["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(models["data"][1]["id"], "llm-base");
}

TEST_F(OpenAiApiTest, AChatReplyCountsItsTokensAndStopsAtMaxTokens) {
  const auto [status, reply] = Call("/v1/chat/completions", Chat("Claim 7: water damage.", {{"ignore_eos", nullptr}}));
  // ignore_eos is not an OpenAI field: refused, naming it.
  EXPECT_EQ(status, 400);
  EXPECT_EQ(reply["error"]["param"], "ignore_eos");
  EXPECT_EQ(reply["error"]["type"], "invalid_request_error");

  const auto [ok, chat] = Call("/v1/chat/completions", Chat("Claim 7: water damage.", {{"seed", 1}}));
  ASSERT_EQ(ok, 200) << chat;
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["model"], "llm-chat");
  EXPECT_EQ(chat["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(chat["choices"].size(), 1u);
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  const int completion = chat["usage"]["completion_tokens"];
  EXPECT_GE(completion, 1);
  EXPECT_LE(completion, 24);
  EXPECT_EQ(chat["choices"][0]["finish_reason"], completion == 24 ? "length" : "stop");
  EXPECT_EQ(chat["usage"]["total_tokens"], chat["usage"]["prompt_tokens"].get<int>() + completion);
  // The prompt is the chat template's rendering: the same count as `llm apply-chat-template`'s.
  std::unique_ptr<llm::Tokenizer> tokenizer = llm::Tokenizer::FromDirectory(dir_->file("llm-chat")).value();
  const Json messages = Chat("Claim 7: water damage.")["messages"];
  EXPECT_EQ(chat["usage"]["prompt_tokens"], llm::ApplyChatTemplate(*tokenizer, messages).value().size());
  // Greedy: the same request, the same reply.
  EXPECT_EQ(Call("/v1/chat/completions", Chat("Claim 7: water damage.")).second["choices"][0]["message"]["content"],
            chat["choices"][0]["message"]["content"]);
}

TEST_F(OpenAiApiTest, StreamedPiecesJoinUpToTheWholeReply) {
  const Json whole = Call("/v1/chat/completions", Chat("Tell me about claim 9.")).second;
  const std::vector<Json> events =
      Stream("/v1/chat/completions",
             Chat("Tell me about claim 9.", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string joined;
  for (size_t i = 0; i + 3 < events.size(); ++i) {
    EXPECT_EQ(events[i]["id"], events[0]["id"]);
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null());
    joined += events[i]["choices"][0]["delta"].value("content", "");
  }
  const Json& last = events[events.size() - 3];
  EXPECT_EQ(last["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(joined, whole["choices"][0]["message"]["content"]);
  const Json& usage = events[events.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], whole["usage"]);
}

TEST_F(OpenAiApiTest, ACompletionEndsAtAStopStringTheTextHad) {
  const Json body = {
      {"model", "llm-base"}, {"prompt", "Claim 12 reported late"}, {"temperature", 0}, {"max_tokens", 40}};
  const auto [status, whole] = Call("/v1/completions", body);
  ASSERT_EQ(status, 200) << whole;
  EXPECT_EQ(whole["object"], "text_completion");
  const std::string text = whole["choices"][0]["text"];
  ASSERT_GE(text.size(), 6u) << "the random model stopped too early to test a stop string";
  // A stop string from the middle of the text: the reply ends just before its first occurrence.
  const std::string stop = text.substr(text.size() / 2, 2);
  Json stopped_body = body;
  stopped_body["stop"] = {stop, "a stop string that never comes"};
  const Json stopped = Call("/v1/completions", stopped_body).second;
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  // Streamed, the stop string is held back and cut just the same.
  stopped_body["stream"] = true;
  std::string joined;
  for (const Json& event : Stream("/v1/completions", stopped_body)) {
    if (event.is_object()) joined += event["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, text.substr(0, text.find(stop)));
  // Token ids work as a prompt too (the completion API's other form).
  std::unique_ptr<llm::Tokenizer> tokenizer = llm::Tokenizer::FromDirectory(dir_->file("llm-base")).value();
  Json by_ids = body;
  by_ids["prompt"] = tokenizer->Encode("Claim 12 reported late", {.add_special_tokens = true});
  EXPECT_EQ(Call("/v1/completions", by_ids).second["choices"][0]["text"], text);
}

TEST_F(OpenAiApiTest, AJsonSchemaResponseFormatConstrainsTheReply) {
  const Json schema = {
      {"type", "object"},
      {"properties", {{"risk", {{"type", "string"}, {"enum", {"low", "high"}}}}, {"score", {{"type", "integer"}}}}},
      {"required", {"risk", "score"}}};
  const Json body =
      Chat("Rate claim 3.",
           {{"max_tokens", 64},
            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "rating"}, {"schema", schema}}}}}});
  const auto [status, reply] = Call("/v1/chat/completions", body);
  ASSERT_EQ(status, 200) << reply;
  const Json rating = Json::parse(reply["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_TRUE(rating["risk"] == "low" || rating["risk"] == "high") << rating;
  EXPECT_TRUE(rating["score"].is_number_integer()) << rating;
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
}

TEST_F(OpenAiApiTest, AnErrorQuotingTheCallersTextHoldsNoCardNumber) {
  const auto [status, reply] = Call("/v1/chat/completions", Chat("x", {{"model", "4111 1111 1111 1111"}}));
  EXPECT_EQ(status, 404) << reply;
  const std::string message = reply["error"]["message"].get<std::string>();
  EXPECT_NE(message.find("[card number redacted]"), std::string::npos) << message;
  EXPECT_EQ(message.find("1111 1111"), std::string::npos) << message;
  // An unsupported field is named in the message and in param, both redacted.
  const auto [field_status, field_reply] = Call("/v1/chat/completions", Chat("x", {{"5555 5555 5555 4444", 1}}));
  EXPECT_EQ(field_status, 400) << field_reply;
  EXPECT_EQ(field_reply["error"]["param"], "[card number redacted]") << field_reply;
  EXPECT_EQ(field_reply.dump().find("5555 5555"), std::string::npos) << field_reply;
}

TEST_F(OpenAiApiTest, RefusalsNameTheFieldAsOpenAiDoes) {
  const auto expect_refusal = [](const std::string& target, const Json& body, int status, const std::string& param,
                                 const std::string& message_part) {
    const auto [got, reply] = Call(target, body);
    EXPECT_EQ(got, status) << body << " -> " << reply;
    EXPECT_EQ(reply["error"]["param"], param.empty() ? Json(nullptr) : Json(param)) << reply;
    EXPECT_NE(reply["error"]["message"].get<std::string>().find(message_part), std::string::npos) << reply;
  };
  expect_refusal("/v1/chat/completions", Chat("x", {{"model", "gpt-4o"}}), 404, "model", "does not exist");
  expect_refusal("/v1/chat/completions", Chat("x", {{"n", 2}}), 400, "n", "only n = 1");
  expect_refusal("/v1/chat/completions", Chat("x", {{"logprobs", true}}), 400, "logprobs", "not supported");
  expect_refusal("/v1/chat/completions", Chat("x", {{"temperature", 3}}), 400, "temperature", "from 0 to 2");
  expect_refusal("/v1/chat/completions", Chat("x", {{"max_tokens", 0}}), 400, "max_tokens", "positive integer");
  expect_refusal("/v1/chat/completions", Chat("x", {{"max_tokens", 5000}}), 400, "messages",
                 "maximum context length is 4096 tokens");
  expect_refusal("/v1/chat/completions", Chat("x", {{"stop", {"a", "b", "c", "d", "e"}}}), 400, "stop", "up to 4");
  expect_refusal("/v1/chat/completions", Chat("x", {{"stop", ""}}), 400, "stop", "non-empty");
  expect_refusal("/v1/chat/completions", Chat("x", {{"stop", {"a", ""}}}), 400, "stop", "non-empty");
  expect_refusal("/v1/chat/completions", Chat("x", {{"tools", {{{"type", "function"}}}}}), 400, "tools",
                 "tool calls are not supported");
  expect_refusal("/v1/chat/completions", {{"model", "llm-chat"}, {"messages", {{{"role", "tool"}, {"content", "x"}}}}},
                 400, "messages[0].role", "tool messages are not supported");
  expect_refusal("/v1/chat/completions",
                 {{"model", "llm-chat"}, {"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
                 400, "messages[0].content", "only text parts");
  expect_refusal("/v1/chat/completions", Chat("x", {{"model", "llm-base"}}), 400, "messages", "no chat template");
  expect_refusal("/v1/chat/completions", Chat("x", {{"response_format", {{"type", "xml"}}}}), 400, "response_format",
                 "text or json_schema");
  expect_refusal("/v1/chat/completions", Chat("x", {{"response_format", {{"type", "json_object"}}}}), 400,
                 "response_format", "give the object's schema");
  // A schema the constraint cannot compile is the caller's error, named.
  expect_refusal("/v1/chat/completions",
                 Chat("x", {{"response_format",
                             {{"type", "json_schema"},
                              {"json_schema",
                               {{"schema",
                                 {{"type", "object"},
                                  {"properties", {{"a", {{"type", "array"}, {"items", {{"type", "number"}}}}}}},
                                  {"required", {"a"}}}}}}}}}),
                 400, "response_format", "only arrays of string enums are supported");
  // A keyword the constraint would not enforce is refused, not ignored.
  expect_refusal("/v1/chat/completions",
                 Chat("x", {{"response_format",
                             {{"type", "json_schema"},
                              {"json_schema", {{"schema", {{"type", "integer"}, {"minimum", 5}, {"maximum", 6}}}}}}}}),
                 400, "response_format", "is not supported for type \"integer\"");
  expect_refusal("/v1/completions", {{"model", "llm-base"}, {"prompt", {"a", "b"}}}, 400, "prompt",
                 "one prompt per request");
  expect_refusal("/v1/completions", {{"model", "llm-base"}, {"prompt", {1, 999999}}}, 400, "prompt", "token ids");
  const std::string not_json = Exchange("POST", "/v1/completions", "{\"model\": ");
  EXPECT_EQ(Status(not_json), 400) << not_json;
  EXPECT_EQ(Status(Exchange("GET", "/v1/completions")), 405);
  // A body over the route's 1 MiB is refused before it is read whole.
  EXPECT_EQ(Status(Exchange("POST", "/v1/chat/completions", Chat(std::string(2 << 20, 'x')).dump())), 413);
}

// The value of one series in /metrics (0 when absent).
double Metric(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(metrics.substr(at + series.size() + 2));
}

TEST_F(OpenAiApiTest, ServingMetricsUseVllmNamesAndCountWhatHappened) {
  const auto scrape = [] { return Body(Exchange("GET", "/metrics")); };
  const std::string model = "{model_name=\"llm-base\"}";
  const std::string before = scrape();
  const auto [status, reply] =
      Call("/v1/completions", {{"model", "llm-base"}, {"prompt", "metrics"}, {"max_tokens", 5}, {"temperature", 0}});
  ASSERT_EQ(status, 200) << reply;
  const std::string after = scrape();
  const double prompt = reply["usage"]["prompt_tokens"], completion = reply["usage"]["completion_tokens"];
  const auto delta = [&](const std::string& series) { return Metric(after, series) - Metric(before, series); };
  EXPECT_EQ(delta("vllm:prompt_tokens_total" + model), prompt);
  EXPECT_EQ(delta("vllm:generation_tokens_total" + model), completion);
  EXPECT_EQ(delta("vllm:time_to_first_token_seconds_count" + model), 1);
  EXPECT_EQ(delta("vllm:e2e_request_latency_seconds_count" + model), 1);
  EXPECT_EQ(delta("vllm:time_per_output_token_seconds_count" + model), completion - 1);  // steps after the first
  const std::string finished = "vllm:request_success_total{model_name=\"llm-base\",finished_reason=\"" +
                               reply["choices"][0]["finish_reason"].get<std::string>() + "\"}";
  EXPECT_EQ(delta(finished), 1);
  // A request refused as the caller's error (a schema the constraint cannot enforce) never ran:
  // no finished request is counted for it, as vLLM counts none.
  const std::string chat_model = "{model_name=\"llm-chat\",finished_reason=\"abort\"}";
  const double aborted_before = Metric(scrape(), "vllm:request_success_total" + chat_model);
  const auto [refused, refusal] = Call(
      "/v1/chat/completions",
      Chat("x", {{"response_format",
                  {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "integer"}, {"maximum", 6}}}}}}}}));
  EXPECT_EQ(refused, 400) << refusal;
  EXPECT_EQ(Metric(scrape(), "vllm:request_success_total" + chat_model), aborted_before);
  // Between batches nothing runs or waits and no cache is held.
  EXPECT_EQ(Metric(after, "vllm:num_requests_running" + model), 0);
  EXPECT_EQ(Metric(after, "vllm:num_requests_waiting" + model), 0);
  EXPECT_EQ(Metric(after, "vllm:kv_cache_usage_perc" + model), 0);
}

TEST_F(OpenAiApiTest, WhileABatchGeneratesTheGaugesShowItsSequencesAndCache) {
  // A long streamed completion holds the batch; the gauges are read meanwhile.
  std::atomic<bool> done{false};
  std::thread caller([&] {
    Stream("/v1/completions",
           {{"model", "llm-base"}, {"prompt", "hold"}, {"max_tokens", 3000}, {"temperature", 0}, {"stream", true}});
    done = true;
  });
  const std::string model = "{model_name=\"llm-base\"}";
  double running = 0, usage = 0;
  for (int i = 0; i < 2000 && !done && running == 0; ++i) {
    const std::string metrics = Body(Exchange("GET", "/metrics"));
    running = Metric(metrics, "vllm:num_requests_running" + model);
    usage = Metric(metrics, "vllm:kv_cache_usage_perc" + model);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  caller.join();
  EXPECT_EQ(running, 1);
  // One sequence of (prompt + 3000) positions out of max_batch 8 x 4096.
  EXPECT_GT(usage, 3000.0 / (8 * 4096));
  EXPECT_LT(usage, 3100.0 / (8 * 4096));
}

TEST_F(OpenAiApiTest, SeededSamplingRepeatsAndOtherOpenAiFormsAreRead) {
  Json sampled = Chat("Claim 4.", {{"temperature", 1.5}, {"top_p", 0.9}, {"seed", 42}});
  const Json first = Call("/v1/chat/completions", sampled).second;
  EXPECT_EQ(Call("/v1/chat/completions", sampled).second["choices"][0]["message"]["content"],
            first["choices"][0]["message"]["content"]);
  // max_completion_tokens is chat's newer name for max_tokens; developer is the newer system.
  Json newer = {{"model", "llm-chat"},
                {"messages", {{{"role", "developer"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "x"}}}},
                {"max_completion_tokens", 3},
                {"temperature", 0}};
  const auto [status, reply] = Call("/v1/chat/completions", newer);
  ASSERT_EQ(status, 200) << reply;
  EXPECT_LE(reply["usage"]["completion_tokens"].get<int>(), 3);
  Json as_system = Chat("x", {{"max_tokens", 3}});
  EXPECT_EQ(reply["usage"]["prompt_tokens"], Call("/v1/chat/completions", as_system).second["usage"]["prompt_tokens"]);
}

TEST_F(OpenAiApiTest, FieldsOfTheWrongTypeOrDepthAreRefusedAndTheServerServesOn) {
  const auto status = [](const Json& body) { return Call("/v1/chat/completions", body).first; };
  EXPECT_EQ(status(Chat("x", {{"response_format", {{"type", 5}}}})), 400);
  EXPECT_EQ(status(Json::parse(R"({"model": "llm-chat", "messages": [{"role": "user",
                                   "content": [{"type": ["text"], "text": "hi"}]}]})")),
            400);
  EXPECT_EQ(status(Json::parse(R"({"model": "llm-chat", "messages": [{"role": "user", "content": "x", "name": 3}]})")),
            400);
  EXPECT_EQ(status(Chat("x", {{"stream", "yes"}})), 400);
  EXPECT_EQ(status(Chat("x", {{"seed", "1"}})), 400);
  // 100,000 nested arrays in a schema: refused before anything walks it.
  const std::string deep = R"({"model": "llm-chat", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"schema": )" +
                           std::string(100000, '[') + std::string(100000, ']') + "}}}";
  const std::string answer = Exchange("POST", "/v1/chat/completions", deep);
  EXPECT_EQ(Status(answer), 400) << answer.substr(0, 300);
  EXPECT_NE(answer.find("nests more than 64 deep"), std::string::npos);
  const std::string not_utf8 = Exchange("POST", "/v1/completions", "{\"model\": \"llm-base\", \"prompt\": \"\xff\"}");
  EXPECT_EQ(Status(not_utf8), 400);
  EXPECT_NE(not_utf8.find("the request body is not JSON"), std::string::npos) << not_utf8;
  EXPECT_EQ(Status(Exchange("GET", "/healthz")), 200);
}

TEST_F(OpenAiApiTest, AMessagesNameReachesTheTemplate) {
  // The generated template does not print names, so the prompt is the same with one: the
  // name is passed, not refused (a template that prints it would show it).
  Json named = {{"model", "llm-chat"},
                {"messages", {{{"role", "user"}, {"content", "x"}, {"name", "adjuster"}}}},
                {"max_tokens", 2},
                {"temperature", 0}};
  EXPECT_EQ(Call("/v1/chat/completions", named).first, 200);
}

TEST_F(OpenAiApiTest, MoreRequestsThanAllowedAtOnceAreAnswered429AndGoneCallersFreeTheirPlaces) {
  // 32 long streamed completions are sent and their answers left unread: the stage runs 8 and
  // queues 24 (max_batch 8), and every place is taken.
  const std::string model = "{model_name=\"llm-base\"}";
  const auto in_stage = [&] {
    const std::string metrics = Body(Exchange("GET", "/metrics"));
    return Metric(metrics, "vllm:num_requests_running" + model) + Metric(metrics, "vllm:num_requests_waiting" + model);
  };
  const std::string body =
      Json{{"model", "llm-base"}, {"prompt", "hold"}, {"max_tokens", 3000}, {"temperature", 0}, {"stream", true}}
          .dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  std::vector<int> holders;
  for (int i = 0; i < 32; ++i) {
    holders.push_back(testing::RawConnect(server_->admin_port()));
    ASSERT_EQ(::send(holders.back(), request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
  }
  ASSERT_TRUE(testing::Eventually([&] { return in_stage() == 32; })) << in_stage();

  const auto [status, reply] =
      Call("/v1/completions", {{"model", "llm-base"}, {"prompt", "one more"}, {"max_tokens", 1}});
  EXPECT_EQ(status, 429) << reply;
  EXPECT_EQ(reply["error"]["type"], "rate_limit_error");
  EXPECT_EQ(reply["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(in_stage(), 32);  // the refused request never joined

  // The callers go away: their requests are cancelled, running or queued, and free their places.
  for (int fd : holders) ::close(fd);
  ASSERT_TRUE(testing::Eventually([&] { return in_stage() == 0; })) << in_stage();
  const auto [after, answer] =
      Call("/v1/completions", {{"model", "llm-base"}, {"prompt", "one more"}, {"max_tokens", 1}});
  EXPECT_EQ(after, 200) << answer;
}

TEST_F(OpenAiApiTest, AGenerationStillRunningAtTheRequestTimeoutEndsWithLength) {
  // The same pipeline behind an API whose requests may take 300 ms (the default is 120 s).
  MetricsRegistry registry;
  OpenAiApi api([] { return server_->pipeline(); }, &registry, {.request_timeout = std::chrono::milliseconds(300)});
  std::map<std::string, AdminRoute> routes;
  api.AddRoutes(&routes);
  auto admin = AdminServer::Create({.host = "127.0.0.1", .port = 0, .plaintext = true}, std::move(routes)).value();
  admin->Start();
  const auto started = std::chrono::steady_clock::now();
  const std::string response = Exchange(
      "POST", "/v1/completions",
      Json{{"model", "llm-base"}, {"prompt", "long"}, {"max_tokens", 4000}, {"temperature", 0}}.dump(), admin->port());
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(Status(response), 200) << response.substr(0, 400);
  const Json reply = Json::parse(Body(response));
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  // "length" short of max_tokens: the timeout cut it (4000 tokens take seconds here, not 0.3).
  EXPECT_GT(reply["usage"]["completion_tokens"], 0);
  EXPECT_LT(reply["usage"]["completion_tokens"], 4000);
  EXPECT_GE(took_s, 0.3);
  admin->Stop();
}

TEST_F(OpenAiApiTest, AnHttp10ClientGetsItsStreamUnchunkedAndClosed) {
  const std::string response = Exchange(
      "POST", "/v1/completions",
      Json{{"model", "llm-base"}, {"prompt", "old"}, {"max_tokens", 4}, {"temperature", 0}, {"stream", true}}.dump(), 0,
      "HTTP/1.0");
  ASSERT_EQ(response.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << response.substr(0, 300);
  EXPECT_EQ(response.find("Transfer-Encoding"), std::string::npos);
  EXPECT_NE(response.find("Connection: close\r\n"), std::string::npos);
  // The events follow the headers as they are: no chunk sizes between them.
  const std::string body = Body(response);
  ASSERT_EQ(body.rfind("data: {", 0), 0u) << body.substr(0, 200);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  // The same events as a chunked HTTP/1.1 stream carries.
  const std::vector<Json> chunked =
      Stream("/v1/completions",
             {{"model", "llm-base"}, {"prompt", "old"}, {"max_tokens", 4}, {"temperature", 0}, {"stream", true}});
  size_t events = 0;
  for (size_t pos = 0; (pos = body.find("data: ", pos)) != std::string::npos; pos += 6) ++events;
  EXPECT_EQ(events, chunked.size());
}

}  // namespace
}  // namespace txscore::service
