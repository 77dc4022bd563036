// txscore llm ...: tools around the LLM stage.
//   llm tokenize --tokenizer FILE|DIR [--decode] [--no-special] [--add-special-tokens]
//   llm apply-chat-template --tokenizer DIR [--lines]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/json_forms.h"
#include "fraud/card_token.h"
#include "fraud/claim.h"
#include "llm/chat_template.h"
#include "llm/checkpoint_maker.h"
#include "llm/claim_analysis.h"
#include "llm/decoder.h"
#include "llm/generator.h"
#include "llm/model_family.h"
#include "llm/tokenizer.h"
#include "pipelines/claim_fields.h"
#include "service/commands/commands.h"
#include "service/commands/progress.h"

namespace txscore::service {
namespace {

struct TokenizeOptions {
  std::string tokenizer_path;
  bool decode = false;
  bool no_special = false;
  bool add_special_tokens = false;
  bool lines = false;
};

int RunTokenize(const TokenizeOptions& options) {
  // A directory brings tokenizer_config.json (add_bos_token) along with the tokenizer.
  std::error_code ignored;
  Result<std::unique_ptr<llm::Tokenizer>> tokenizer = std::filesystem::is_directory(options.tokenizer_path, ignored)
                                                          ? llm::Tokenizer::FromDirectory(options.tokenizer_path)
                                                          : llm::Tokenizer::FromFile(options.tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.error().ToString().c_str());
    return 1;
  }
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (options.decode) {
    // One JSON array of ids (or, with --lines, one per line, each answered by a JSON string).
    std::istringstream in(input);
    std::string line;
    size_t number = 0;
    auto decode_one = [&](const std::string& text, std::string* out) -> bool {
      const nlohmann::json ids = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (ids.is_discarded() || !ids.is_array()) {
        std::fprintf(stderr, "line %zu: --decode reads a JSON array of token ids\n", number);
        return false;
      }
      std::vector<int32_t> tokens;
      for (const auto& id : ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (*tokenizer)->vocab_size()) {
          std::fprintf(stderr, "line %zu: token id %s is outside the vocabulary (0..%d)\n", number, id.dump().c_str(),
                       (*tokenizer)->vocab_size() - 1);
          return false;
        }
        tokens.push_back(id.get<int32_t>());
      }
      *out = (*tokenizer)->Decode(tokens);
      return true;
    };
    std::string text;
    if (!options.lines) {
      number = 1;
      if (!decode_one(input, &text)) return 1;
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    while (std::getline(in, line)) {
      ++number;
      if (!decode_one(line, &text)) return 1;
      std::printf("%s\n", nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 0;
  }
  llm::EncodeOptions encode;
  encode.parse_special = !options.no_special;
  encode.add_special_tokens = options.add_special_tokens;
  if (!options.lines) {
    std::printf("%s\n", nlohmann::json((*tokenizer)->Encode(input, encode)).dump().c_str());
    return 0;
  }
  // --lines: every input line is a JSON string (so texts may hold newlines); one array out per line.
  std::istringstream in(input);
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const nlohmann::json text = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (text.is_discarded() || !text.is_string()) {
      std::fprintf(stderr, "line %zu: expected a JSON string\n", number);
      return 1;
    }
    std::printf("%s\n", nlohmann::json((*tokenizer)->Encode(text.get<std::string>(), encode)).dump().c_str());
  }
  return 0;
}

struct AnalyzeOptions {
  std::string model_dir;
  std::string claim_path;
  int max_new_tokens = 160;
  std::string dtype = "float32";
};

// The claim named by --claim: a JSON object in the claims format (fraud/claim.h) given
// inline, or a file holding one (a JSON-lines file: its first line), validated as a job would.
Result<llm::ClaimFields> ReadClaimArgument(const std::string& argument) {
  std::string text = argument;
  const size_t first = argument.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || argument[first] != '{') {
    std::ifstream in(argument);
    if (!in) return NotFound("--claim: no file " + argument + " (give a claim as a JSON object or a file holding one)");
    std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const nlohmann::json doc = nlohmann::json::parse(whole, nullptr, /*allow_exceptions=*/false);
    text = doc.is_object() ? whole : whole.substr(0, whole.find('\n'));
  }
  // Only one line for the parser: an object spread over lines is put on one.
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return InvalidArgument("--claim: expected a JSON object with the claim's fields");
  Result<fraud::RawClaim> raw = fraud::ParseClaimJson(doc.dump());
  if (!raw.ok()) return InvalidArgument("--claim: " + raw.error().message);
  // The claimant's token is not part of the LLM's view; any key will do to validate the rest.
  const auto throwaway = fraud::CardTokenizer::FromKey(std::string(fraud::CardTokenizer::kMinKeyBytes, 'x'));
  Result<fraud::Claim> claim = fraud::ValidateClaim(*raw, *throwaway);
  if (!claim.ok()) return InvalidArgument("--claim: " + claim.error().message);
  return pipelines::ClaimFieldsFor(*claim);
}

int RunAnalyzeClaim(const AnalyzeOptions& options) {
  Result<llm::ClaimFields> read = ReadClaimArgument(options.claim_path);
  if (!read.ok()) {
    std::fprintf(stderr, "%s\n", read.error().message.c_str());
    return 2;
  }
  const llm::ClaimFields claim = std::move(read).value();
  auto tokenizer = llm::Tokenizer::FromDirectory(options.model_dir);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.error().ToString().c_str());
    return 1;
  }
  auto decoder = llm::Decoder::Load(options.model_dir, {.dtype = *accelerator::ParseDtype(options.dtype)});
  if (!decoder.ok()) {
    std::fprintf(stderr, "%s\n", decoder.error().ToString().c_str());
    return 1;
  }
  llm::Generator generator(decoder->get(), tokenizer->get());
  llm::GenerationOptions generation;
  generation.max_new_tokens = options.max_new_tokens;
  auto findings = llm::ClaimAnalysisTask::Analyze(generator, **tokenizer, claim, generation, options.model_dir);
  if (!findings.ok()) {
    std::fprintf(stderr, "%s\n", findings.error().ToString().c_str());
    return 1;
  }
  nlohmann::ordered_json out = {{"claim_id", claim.claim_id}};
  out.update(FindingsToJson<nlohmann::ordered_json>(*findings));
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

// One request: {"messages": [...], "add_generation_prompt": true, "tools": [...], "extra": {...}}
// -> {"text": "...", "ids": [...]}, or {"error": "..."}.
nlohmann::ordered_json ApplyChatTemplateTo(const llm::Tokenizer& tokenizer, const std::string& request_text) {
  const llm::jinja::Json request = llm::jinja::Json::parse(request_text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object() || !request.contains("messages")) {
    return {{"error", "each request is a JSON object with \"messages\""}};
  }
  llm::ChatTemplateOptions options;
  if (request.contains("add_generation_prompt")) {
    if (!request["add_generation_prompt"].is_boolean())
      return {{"error", "add_generation_prompt must be true or false"}};
    options.add_generation_prompt = request["add_generation_prompt"].get<bool>();
  }
  if (request.contains("tools")) options.tools = request["tools"];
  if (request.contains("extra")) {
    if (!request["extra"].is_object()) return {{"error", "extra must be an object"}};
    options.extra = request["extra"];
  }
  Result<std::string> text = tokenizer.chat_template()->Render(request["messages"], options);
  if (!text.ok()) return {{"error", text.error().ToString()}};
  return {{"text", *text}, {"ids", tokenizer.Encode(*text)}};
}

int RunApplyChatTemplate(const std::string& tokenizer_dir, bool lines) {
  Result<std::unique_ptr<llm::Tokenizer>> tokenizer = llm::Tokenizer::FromDirectory(tokenizer_dir);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.error().ToString().c_str());
    return 1;
  }
  if ((*tokenizer)->chat_template() == nullptr) {
    std::fprintf(stderr, "%s has no chat template (tokenizer_config.json's chat_template)\n", tokenizer_dir.c_str());
    return 1;
  }
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::vector<std::string> requests;
  if (lines) {
    std::istringstream in(input);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) requests.push_back(line);
    }
  } else {
    requests.push_back(input);
  }
  int exit_code = 0;
  for (const std::string& request : requests) {
    const nlohmann::ordered_json answer = ApplyChatTemplateTo(**tokenizer, request);
    if (answer.contains("error")) {
      exit_code = 1;
      if (!lines) {
        std::fprintf(stderr, "%s\n", answer["error"].get<std::string>().c_str());
        return exit_code;
      }
    }
    std::printf("%s\n", answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return exit_code;
}

}  // namespace

void AddLlmCommand(CLI::App& app, int* exit_code) {
  CLI::App* llm = app.add_subcommand(
      "llm",
      "LLM tools: tokenize text, analyze a claim, make a random-weight checkpoint (text generation: txscore generate)");
  llm->require_subcommand(1);
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize =
      llm->add_subcommand("tokenize", "Text on stdin -> JSON array of token ids (or back with --decode)");
  tokenize
      ->add_option("--tokenizer", options->tokenizer_path,
                   "A Hugging Face tokenizer.json, a SentencePiece tokenizer.model, or a directory holding one (and "
                   "tokenizer_config.json, read for add_bos_token)")
      ->required();
  tokenize->add_flag("--decode", options->decode, "Read a JSON array of ids and print the text");
  tokenize->add_flag("--no-special", options->no_special, "Treat special-token text as plain text");
  tokenize->add_flag("--add-special-tokens", options->add_special_tokens,
                     "Add the tokenizer's special tokens around each text (the BOS of Llama 3 and Gemma), from "
                     "tokenizer.json's post_processor and tokenizer_config.json's add_bos_token, as Hugging Face's "
                     "add_special_tokens=True does");
  tokenize->add_flag(
      "--lines", options->lines,
      "Line mode: each input line is a JSON string (or, with --decode, an id array); one result per line");
  tokenize->callback([options, exit_code] { *exit_code = RunTokenize(*options); });

  auto chat_dir = std::make_shared<std::string>();
  auto chat_lines = std::make_shared<bool>(false);
  CLI::App* chat = llm->add_subcommand(
      "apply-chat-template",
      "Render the checkpoint's chat template: a JSON request on stdin ({\"messages\": [...], "
      "\"add_generation_prompt\": true, \"tools\": [...], \"extra\": {...}}) -> {\"text\", \"ids\"}");
  chat->add_option("--tokenizer", *chat_dir, "Checkpoint (or tokenizer) directory with tokenizer_config.json")
      ->required();
  chat->add_flag("--lines", *chat_lines,
                 "One request per input line, one answer per output line ({\"error\"} for one that fails)");
  chat->callback([chat_dir, chat_lines, exit_code] { *exit_code = RunApplyChatTemplate(*chat_dir, *chat_lines); });

  auto analyze = std::make_shared<AnalyzeOptions>();
  CLI::App* claim = llm->add_subcommand(
      "analyze-claim", "Read a claim (the claims format, inline or a file) and print structured findings");
  claim->add_option("--model", analyze->model_dir, "Checkpoint directory")->required();
  claim
      ->add_option("--claim", analyze->claim_path,
                   "The claim: a JSON object in the claims format (docs/claims-jobs.md names its fields), or a file "
                   "holding one (of a JSON-lines file, the first line)")
      ->required();
  claim->add_option("--max-new-tokens", analyze->max_new_tokens, "Token budget (at least 50)")->capture_default_str();
  claim->add_option("--dtype", analyze->dtype, "float32 or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  claim->callback([analyze, exit_code] { *exit_code = RunAnalyzeClaim(*analyze); });

  auto spec = std::make_shared<llm::CheckpointSpec>();
  auto out_dir = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>("bfloat16");
  CLI::App* make =
      llm->add_subcommand("make-checkpoint", "Write a random-weight checkpoint in the Hugging Face layout");
  std::string families;
  for (const std::string& name : llm::BuiltinModelFamilies().Names()) families += (families.empty() ? "" : ", ") + name;
  make->add_option("--family", spec->family, "One of the registered families: " + families)->required();
  make->add_option("--size", spec->size, "tiny, small or 0.5b")->capture_default_str();
  make->add_option("--out", *out_dir, "Output directory")->required();
  make->add_option("--seed", spec->seed, "Weight and tokenizer seed")->capture_default_str();
  make->add_option("--dtype", *dtype, "Stored dtype: bfloat16 or float32")
      ->check(CLI::IsMember({"bfloat16", "float32"}))
      ->capture_default_str();
  auto no_chat_template = std::make_shared<bool>(false);
  make->add_flag("--no-chat-template", *no_chat_template,
                 "Leave the chat template out of tokenizer_config.json (as base models do)");
  make->callback([spec, out_dir, dtype, no_chat_template, exit_code] {
    spec->chat_template = !*no_chat_template;
    spec->dtype = *dtype == "float32" ? llm::DType::kF32 : llm::DType::kBF16;
    ProgressDisplay display("make-checkpoint", "steps");
    spec->progress = [&display](int done, int total) { display.Update(done, total); };
    Result<llm::CheckpointSummary> summary = llm::MakeCheckpoint(*spec, *out_dir);
    if (!summary.ok()) {
      std::fprintf(stderr, "%s\n", summary.error().ToString().c_str());
      *exit_code = 1;
      return;
    }
    std::printf("wrote %s: %s %s, %lld parameters (random weights), tokenizer of %lld tokens, vocab_size %lld\n",
                out_dir->c_str(), spec->family.c_str(), spec->size.c_str(), static_cast<long long>(summary->parameters),
                static_cast<long long>(summary->tokenizer_vocab), static_cast<long long>(summary->config_vocab));
  });
}

}  // namespace txscore::service
