// txscore generate --model DIR --prompt TEXT [--schema FILE] [--max-new-tokens N] [--json]
// [--dtype bfloat16] [--quantization int8] [--threads N]: try a model. Greedy unless sampling
// options are given. By default every core of the machine computes, as
// bench/run_llm_floor.sh measures the kernels (--threads 2 on a 2-core machine).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "accelerator/compute_threads.h"
#include "common/bytes.h"
#include "llm/cpu_kernels/decode_step.h"
#include "llm/decoder.h"
#include "llm/generator.h"
#include "llm/tokenizer.h"
#include "service/commands/commands.h"

namespace txscore::service {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;  // JSON array; instead of --prompt
  std::string schema_path;
  bool json = false;
  std::string dtype = "float32";
  std::string dump_logits;  // file: float32 little-endian, one row of vocab_size per step
  std::string quantization = "none";
  int threads = 0;  // 0: the machine's cores
  llm::GenerationOptions generation;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 1;
}

int RunGenerate(GenerateOptions& options) {
  Result<std::unique_ptr<llm::Tokenizer>> tokenizer = llm::Tokenizer::FromDirectory(options.model_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.error().ToString());
  llm::DecoderOptions decoder_options;
  decoder_options.dtype = *accelerator::ParseDtype(options.dtype);  // one of the two the option accepts
  if (options.quantization == "int8") decoder_options.quantization = llm::DecoderOptions::Quantization::kInt8;
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // The kernels' pool (decode steps), and libtorch's and OpenBLAS's threads (the prefill).
  decoder_options.threads = threads;
  accelerator::SetComputeThreads(threads);
  Result<std::unique_ptr<llm::Decoder>> decoder = llm::Decoder::Load(options.model_dir, decoder_options);
  if (!decoder.ok()) return Fail(decoder.error().ToString());

  std::vector<int32_t> prompt;
  if (!options.prompt_ids.empty()) {
    const nlohmann::json ids = nlohmann::json::parse(options.prompt_ids, nullptr, false);
    if (ids.is_discarded() || !ids.is_array()) return Fail("--prompt-ids must be a JSON array of token ids");
    for (const auto& id : ids) {
      if (!id.is_number_integer()) return Fail("--prompt-ids must be a JSON array of token ids");
      prompt.push_back(id.get<int32_t>());
    }
  } else {
    // With the BOS the model always saw first, as Hugging Face's tokenizer(prompt) gives, but
    // once: not again when the prompt writes it itself (where Hugging Face would double it);
    // not with an EOS an add_eos_token would append, which would end the text before generation.
    const std::vector<int32_t> text = (*tokenizer)->Encode(options.prompt);
    prompt = (*tokenizer)->SpecialPrefix();
    if (text.size() >= prompt.size() && std::equal(prompt.begin(), prompt.end(), text.begin())) prompt.clear();
    prompt.insert(prompt.end(), text.begin(), text.end());
  }
  if (!options.schema_path.empty()) {
    std::ifstream in(options.schema_path);
    if (!in) return Fail("cannot read the schema " + options.schema_path);
    std::stringstream text;
    text << in.rdbuf();
    options.generation.schema = text.str();
  }
  std::ofstream logits_out;
  if (!options.dump_logits.empty()) {
    logits_out.open(options.dump_logits, std::ios::binary | std::ios::trunc);
    if (!logits_out) return Fail("cannot write --dump-logits file " + options.dump_logits);
    options.generation.on_logits = [&logits_out](const std::vector<float>& row) {
      std::string bytes;
      for (float v : row) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        PutU32LE(&bytes, bits);
      }
      logits_out << bytes;
    };
  }
  llm::Generator generator(decoder->get(), tokenizer->get());
  Result<llm::GenerationResult> result = generator.Generate(prompt, options.generation);
  if (!result.ok()) return Fail(result.error().ToString());
  if (logits_out.is_open()) {
    logits_out.close();
    if (!logits_out) return Fail("writing --dump-logits file " + options.dump_logits + " failed (disk full?)");
  }
  if (options.json) {
    nlohmann::json out = {{"prompt_ids", result->prompt_ids},
                          {"generated_ids", result->generated_ids},
                          {"text", result->text},
                          {"finish_reason", llm::FinishReasonName(result->finish_reason)},
                          {"prefill_us", result->prefill_us},
                          {"token_us", result->token_us},
                          {"threads", threads},
                          {"quantization", options.quantization},
                          // Decode steps txscore's CPU kernels ran (bfloat16 or int8 on the CPU;
                          // float32 runs libtorch's ops): every step after the first, or none.
                          {"cpu_kernel_steps", llm::cpu::DecodeStepsRun()}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", result->text.c_str());
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a Hugging Face checkpoint");
  cmd->add_option("--model", options->model_dir, "Checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--prompt", options->prompt,
                  "Prompt text, after the tokenizer's special prefix (the BOS of Llama 3 and Gemma)");
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt as a JSON array of token ids (instead of --prompt)");
  cmd->add_option("--schema", options->schema_path, "JSON schema file: the output always parses and validates");
  cmd->add_option("--max-new-tokens", options->generation.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature", options->generation.sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", options->generation.sampling.top_k, "Sample among the k most likely (0 = all)")
      ->capture_default_str();
  cmd->add_option("--top-p", options->generation.sampling.top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", options->generation.sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--stop", options->generation.stop, "Stop when the text ends with this (repeatable)");
  cmd->add_flag("--json", options->json, "Print prompt ids, generated ids, text and timings as one JSON object");
  cmd->add_flag("--ignore-eos", options->generation.ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_option("--dtype", options->dtype, "float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--quantization", options->quantization,
                  "none, or int8: weights quantized per row at load (needs --dtype bfloat16)")
      ->check(CLI::IsMember({"none", "int8"}))
      ->capture_default_str();
  cmd->add_option("--threads", options->threads, "Threads that compute (default: the machine's cores)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--dump-logits", options->dump_logits, "Write each step's logits (float32, little-endian) to FILE");
  cmd->callback([options, exit_code] { *exit_code = RunGenerate(*options); });
}

}  // namespace txscore::service
