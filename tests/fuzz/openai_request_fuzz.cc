// The OpenAI-compatible endpoints' request reading (service/openai_api.h): the input's first
// byte picks /v1/chat/completions (odd) or /v1/completions (even), the rest is the body. With
// no pipeline serving, a body that reads as a request ends at 404 (no such model); anything
// else must be a 400 naming what is wrong. Either way exactly one answer, an OpenAI error
// object, and never a crash, an exception or unbounded recursion (a body nested past 64 levels).
#include <nlohmann/json.hpp>
#include <string>

#include "service/metrics.h"
#include "service/openai_api.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using txscore::service::HttpResponse;

class RecordingResponder : public txscore::service::AdminResponder {
 public:
  void Respond(HttpResponse answer) override {
    ++answers;
    last = std::move(answer);
  }
  void Begin(const std::string&) override { txscore::fuzz::Fail("a refused request began a stream"); }
  bool Send(std::string) override { return false; }
  bool client_gone() const override { return false; }
  int answers = 0;
  HttpResponse last;
};

std::map<std::string, txscore::service::AdminRoute>& Routes() {
  static auto* registry = new txscore::service::MetricsRegistry();
  static auto* api = new txscore::service::OpenAiApi([] { return nullptr; }, registry);
  static auto* routes = [] {
    auto* r = new std::map<std::string, txscore::service::AdminRoute>();
    api->AddRoutes(r);
    return r;
  }();
  return *routes;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Routes();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using txscore::fuzz::Fail;
  if (size == 0) return 0;
  const std::string target = data[0] % 2 == 1 ? "/v1/chat/completions" : "/v1/completions";
  txscore::service::AdminRequest request;
  request.target = target;
  request.body = std::string(txscore::fuzz::AsText(data + 1, size - 1));
  RecordingResponder responder;
  try {
    Routes().at(target).request_handler(request, responder);
  } catch (const std::exception& e) {
    Fail(std::string("the handler threw: ") + e.what());
  }
  if (responder.answers != 1) Fail("answers: " + std::to_string(responder.answers));
  const int status = responder.last.status;
  if (status != 400 && status != 404) Fail("status " + std::to_string(status) + ": " + responder.last.body);
  const auto error = nlohmann::json::parse(responder.last.body, nullptr, false);
  if (error.is_discarded() || !error.contains("error") || !error["error"]["message"].is_string()) {
    Fail("not an OpenAI error object: " + responder.last.body);
  }
  return 0;
}
