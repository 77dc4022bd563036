// txscore generate --model DIR --prompt TEXT [--max-new-tokens N] [--json]: try a model.
// Greedy decoding; sampling and constrained decoding arrive with the generator.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "llm/decoder.h"
#include "llm/tokenizer.h"
#include "service/commands/commands.h"

namespace txscore::service {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;  // JSON array; instead of --prompt
  int max_new_tokens = 32;
  bool json = false;
  bool ignore_eos = false;
  std::string dtype = "float32";
  std::string dump_logits;  // file: float32 little-endian, one row of vocab_size per step
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 1;
}

int RunGenerate(const GenerateOptions& options) {
  Result<std::unique_ptr<llm::Tokenizer>> tokenizer = llm::Tokenizer::FromFile(options.model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return Fail(tokenizer.error().ToString());
  llm::DecoderOptions decoder_options;
  decoder_options.dtype = options.dtype;
  Result<std::unique_ptr<llm::Decoder>> decoder = llm::Decoder::Load(options.model_dir, decoder_options);
  if (!decoder.ok()) return Fail(decoder.error().ToString());

  std::vector<int32_t> prompt;
  if (!options.prompt_ids.empty()) {
    const nlohmann::json ids = nlohmann::json::parse(options.prompt_ids, nullptr, false);
    if (ids.is_discarded() || !ids.is_array()) return Fail("--prompt-ids must be a JSON array of token ids");
    for (const auto& id : ids) prompt.push_back(id.get<int32_t>());
  } else {
    prompt = (*tokenizer)->Encode(options.prompt);
  }
  if (prompt.empty()) return Fail("the prompt is empty");

  const int max_tokens = static_cast<int>(prompt.size()) + options.max_new_tokens;
  auto cache = (*decoder)->NewCache(1, max_tokens);
  std::ofstream logits_out;
  if (!options.dump_logits.empty()) logits_out.open(options.dump_logits, std::ios::binary | std::ios::trunc);
  const auto& eos = (*decoder)->config().eos_token_ids;
  std::vector<int32_t> generated;
  std::vector<int32_t> step = prompt;
  for (int n = 0; n < options.max_new_tokens; ++n) {
    Result<std::vector<std::vector<float>>> logits = (*decoder)->Forward(cache.get(), {step});
    if (!logits.ok()) return Fail(logits.error().ToString());
    const std::vector<float>& row = (*logits)[0];
    if (logits_out.is_open()) {
      std::string bytes;
      for (float v : row) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        PutU32LE(&bytes, bits);
      }
      logits_out << bytes;
    }
    const int32_t next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    generated.push_back(next);
    if (!options.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    step = {next};
  }
  const std::string text = (*tokenizer)->Decode(generated, {.skip_special = true});
  if (options.json) {
    nlohmann::json out = {{"prompt_ids", prompt}, {"generated_ids", generated}, {"text", text}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", text.c_str());
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a Hugging Face checkpoint (greedy)");
  cmd->add_option("--model", options->model_dir, "Checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--prompt", options->prompt, "Prompt text");
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt as a JSON array of token ids (instead of --prompt)");
  cmd->add_option("--max-new-tokens", options->max_new_tokens, "Tokens to generate at most")->capture_default_str();
  cmd->add_flag("--json", options->json, "Print prompt ids, generated ids and text as one JSON object");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_option("--dtype", options->dtype, "float32 or bfloat16")->capture_default_str();
  cmd->add_option("--dump-logits", options->dump_logits, "Write each step's logits (float32, little-endian) to FILE");
  cmd->callback([options, exit_code] { *exit_code = RunGenerate(*options); });
}

}  // namespace txscore::service
