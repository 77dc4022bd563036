// The Jinja engine (llm/jinja.h) on templates from outside: a chat template comes from a
// checkpoint directory nobody here wrote. The input is the template's source. Parse must
// accept it or refuse it with an error; an accepted template is rendered on a fixed
// conversation and must give text or an error, within RenderLimits (tight here, so that a
// loop the fuzzer writes ends quickly): never a crash, a hang or output past the limit.
#include <string>

#include "llm/jinja.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using txscore::llm::jinja::Json;

const Json& Conversation() {
  static const Json variables = Json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are a claims analyst."},
      {"role": "user", "content": "Claim 7: water damage, reported late."},
      {"role": "assistant", "content": "{\"risk_level\": \"high\"}"},
      {"role": "user", "content": "And claim 8?", "name": "adjuster"}
    ],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "tools": null, "documents": null, "enable_thinking": false
  })");
  return variables;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using txscore::fuzz::Fail;
  namespace jinja = txscore::llm::jinja;
  auto parsed = jinja::Template::Parse(txscore::fuzz::AsText(data, size), "fuzz.jinja");
  if (!parsed.ok()) {
    if (parsed.error().code != txscore::ErrorCode::kInvalidArgument) Fail("Parse: " + parsed.error().ToString());
    return 0;
  }
  const jinja::RenderLimits limits{.max_output_bytes = 64 << 10, .max_value_bytes = 256 << 10, .max_steps = 100'000};
  auto rendered = parsed->Render(Conversation(), limits);
  if (rendered.ok()) {
    if (rendered->size() > limits.max_output_bytes) Fail("rendered past max_output_bytes");
  } else if (rendered.error().code != txscore::ErrorCode::kInvalidArgument &&
             rendered.error().code != txscore::ErrorCode::kResourceExhausted) {
    Fail("Render: " + rendered.error().ToString());
  }
  return 0;
}
