#include "llm/checkpoint_maker.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "llm/model_config.h"
#include "llm/model_family.h"
#include "llm/tokenizer_trainer.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

struct Dimensions {
  CheckpointDimensions model;
  int64_t tokenizer_vocab, corpus_documents;
  int64_t config_vocab;  // 0: the tokenizer's size rounded up to a multiple of 64
};

Result<Dimensions> DimensionsFor(const std::string& size) {
  // hidden, layers, heads, kv_heads, head_dim, intermediate, sliding_window
  if (size == "tiny") return Dimensions{{64, 2, 4, 2, 16, 128, 8}, 512, 600, 0};
  if (size == "small") return Dimensions{{256, 4, 8, 2, 32, 704, 64}, 2048, 3000, 0};
  if (size == "0.5b") return Dimensions{{896, 24, 14, 2, 64, 4864, 4096}, 4096, 6000, 151936};
  return InvalidArgument("size must be tiny, small or 0.5b, not \"" + size + "\"", "size");
}

// "a, b or c"
std::string OneOf(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return out;
}

// Normal random numbers from a fully specified generator (SplitMix64 + Box-Muller).
class Normal {
 public:
  explicit Normal(uint64_t seed) : state_(seed) {}
  float Next(float stddev) {
    const double u1 = (static_cast<double>(NextBits() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(NextBits() >> 11) * 0x1.0p-53;
    return static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

 private:
  uint64_t NextBits() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

// The keys every template shares; the family's template is written over them.
json SharedConfig(const CheckpointDimensions& d, int64_t vocab, int64_t eos, int64_t bos) {
  return {{"hidden_size", d.hidden},
          {"num_hidden_layers", d.layers},
          {"num_attention_heads", d.heads},
          {"num_key_value_heads", d.kv_heads},
          {"intermediate_size", d.intermediate},
          {"vocab_size", vocab},
          {"max_position_embeddings", 4096},
          {"rms_norm_eps", 1e-6},
          {"tie_word_embeddings", true},
          {"attention_bias", false},
          {"bos_token_id", bos},
          {"eos_token_id", eos},
          {"torch_dtype", "bfloat16"}};
}

// The chat template of generated checkpoints: ChatML (the markers their tokenizer has), after
// the BOS of the families whose real tokenizers start with one. Our own, written for these
// checkpoints; real checkpoints bring theirs.
const char kChatMlTemplate[] =
    "{{- bos_token if bos_token is defined else '' -}}\n"
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

// The BOS the family's real tokenizer puts before every text, as its files say it.
json BosPostProcessor(BosConvention convention, const std::string& bos, int64_t bos_id) {
  const json single = {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}};
  const json template_processing = {{"type", "TemplateProcessing"},
                                    {"single", single},
                                    {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
  if (convention != BosConvention::kAfterByteLevel) return template_processing;
  return {{"type", "Sequence"},
          {"processors",
           {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
            template_processing}}};
}

}  // namespace

Result<CheckpointSummary> MakeCheckpoint(const CheckpointSpec& spec, const std::string& out_dir) {
  const ModelFamilyRegistry& families = spec.families != nullptr ? *spec.families : BuiltinModelFamilies();
  const ModelFamily* family = families.Find(spec.family);
  if (family == nullptr) {
    return InvalidArgument("family must be " + OneOf(families.Names()) + ", not \"" + spec.family + "\"", "family");
  }
  Result<Dimensions> dims = DimensionsFor(spec.size);
  if (!dims.ok()) return dims.error();
  const Dimensions& d = *dims;
  const CheckpointTemplate family_template = family->MakeCheckpointTemplate(d.model);

  BpeTrainingOptions training;
  training.vocab_size = static_cast<int>(d.tokenizer_vocab);
  const std::string& bos = family_template.bos_token;
  if (!bos.empty()) training.special_tokens.push_back(bos);  // last: the other ids stay as they were
  Result<std::string> tokenizer =
      TrainByteLevelBpe(GenerateTrainingCorpus(spec.seed, static_cast<int>(d.corpus_documents)), training);
  if (!tokenizer.ok()) return tokenizer.error();
  json tokenizer_doc = json::parse(*tokenizer);
  int64_t tokenizer_vocab = static_cast<int64_t>(tokenizer_doc["model"]["vocab"].size());
  int64_t endoftext = 0, im_end = 0, bos_id = -1;
  for (const json& t : tokenizer_doc["added_tokens"]) {
    tokenizer_vocab = std::max(tokenizer_vocab, t["id"].get<int64_t>() + 1);
    if (t["content"] == "<|endoftext|>") endoftext = t["id"].get<int64_t>();
    if (t["content"] == "<|im_end|>") im_end = t["id"].get<int64_t>();
    if (!bos.empty() && t["content"] == bos) bos_id = t["id"].get<int64_t>();
  }
  const int64_t vocab = d.config_vocab > 0 ? d.config_vocab : (tokenizer_vocab + 63) / 64 * 64;
  std::vector<std::pair<std::string, std::string>> tokenizer_files;
  json tokenizer_config = json::object();
  if (bos_id >= 0) {
    tokenizer_doc["post_processor"] = BosPostProcessor(family_template.bos, bos, bos_id);
    if (family_template.bos == BosConvention::kTemplateAndTokenizerConfig) tokenizer_config["add_bos_token"] = true;
    tokenizer_config["bos_token"] = bos;
  }
  if (spec.chat_template) {
    tokenizer_config["eos_token"] = "<|im_end|>";
    tokenizer_config["chat_template"] = kChatMlTemplate;
  }
  if (!tokenizer_config.empty()) tokenizer_files.emplace_back("tokenizer_config.json", tokenizer_config.dump(2) + "\n");
  tokenizer_files.emplace_back("tokenizer.json", tokenizer_doc.dump(1));

  // Qwen3's config names <|endoftext|> as bos_token_id though its tokenizer adds no BOS, as
  // the real one does.
  json config = SharedConfig(d.model, vocab, im_end, bos_id >= 0 ? bos_id : endoftext);
  config.update(family_template.config);
  if (spec.tie_word_embeddings) config["tie_word_embeddings"] = *spec.tie_word_embeddings;
  if (spec.attention_bias) config["attention_bias"] = *spec.attention_bias;
  config["eos_token_id"] = {im_end, endoftext};
  // The tensors are the ones the decoder will read from this config, under the family's names.
  Result<ModelConfig> parsed = ParseModelConfig(config.dump(), "the " + spec.family + " checkpoint template", families);
  if (!parsed.ok()) return parsed.error();
  const ModelConfig& c = *parsed;
  const WeightNames names = family->weight_layouts().front();
  const int64_t hidden = c.hidden_size, head_dim = c.head_dim;
  const int64_t q_dim = c.num_attention_heads * head_dim, kv_dim = c.num_key_value_heads * head_dim;

  Normal normal(spec.seed);
  SafetensorsWriter writer;
  CheckpointSummary summary;
  summary.tokenizer_vocab = tokenizer_vocab;
  summary.config_vocab = vocab;
  // Linear weights ~ N(0, 1/fan_in) keep activations O(1); embeddings with stddev 0.5 give
  // logits spread wide enough that greedy decoding is not decided by rounding.
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float stddev, float mean) -> Status {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = mean + normal.Next(stddev);
    summary.parameters += n;
    return writer.AddFloats(name, spec.dtype, std::move(shape), values);
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    return add(name, {out, in}, 1.0f / std::sqrt(static_cast<float>(in)), 0.0f);
  };
  // Gemma norms scale by (1 + w): weights near 0; the others scale by w: weights near 1.
  auto norm = [&](const std::string& name, int64_t size) {
    return add(name, {size}, 0.1f, c.norm_weight_plus_one ? 0.0f : 1.0f);
  };
  using W = DecoderWeight;

  const int steps = static_cast<int>(c.num_hidden_layers) + 2;  // the embedding, each layer, writing
  auto report = [&](int done) {
    if (spec.progress) spec.progress(done, steps);
  };
  TXSCORE_RETURN_IF_ERROR(add(names.Name(W::kEmbedTokens), {vocab, hidden}, 0.5f, 0.0f));
  report(1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kInputNorm, l), hidden));
    TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kPostAttentionNorm, l), hidden));
    if (c.sandwich_norms) {
      TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kPreFeedforwardNorm, l), hidden));
      TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kPostFeedforwardNorm, l), hidden));
    }
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kQProj, l), q_dim, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kKProj, l), kv_dim, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kVProj, l), kv_dim, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kOProj, l), hidden, q_dim));
    if (c.attention_bias) {
      // As large as the products they are added to, so that a lost bias shows in the logits.
      TXSCORE_RETURN_IF_ERROR(add(names.Name(W::kQBias, l), {q_dim}, 0.5f, 0.0f));
      TXSCORE_RETURN_IF_ERROR(add(names.Name(W::kKBias, l), {kv_dim}, 0.5f, 0.0f));
      TXSCORE_RETURN_IF_ERROR(add(names.Name(W::kVBias, l), {kv_dim}, 0.5f, 0.0f));
    }
    if (c.qk_norm) {
      TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kQNorm, l), head_dim));
      TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kKNorm, l), head_dim));
    }
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kGateProj, l), c.intermediate_size, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kUpProj, l), c.intermediate_size, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kDownProj, l), hidden, c.intermediate_size));
    report(static_cast<int>(l) + 2);
  }
  TXSCORE_RETURN_IF_ERROR(norm(names.Name(W::kFinalNorm), hidden));
  if (!c.tie_word_embeddings) TXSCORE_RETURN_IF_ERROR(linear(names.Name(W::kLmHead), vocab, hidden));
  writer.SetMetadata("format", "pt");
  writer.SetMetadata("generator", "txscore llm make-checkpoint (random weights)");

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Internal("cannot create " + out_dir + ": " + ec.message());
  const std::filesystem::path dir(out_dir);
  TXSCORE_RETURN_IF_ERROR(writer.Write((dir / "model.safetensors").string()));
  tokenizer_files.emplace_back("config.json", config.dump(2) + "\n");
  for (const auto& [name, text] : tokenizer_files) {
    const std::string tmp = (dir / (name + ".tmp")).string();
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << text;
      if (!out) return Internal("cannot write " + tmp);
    }
    std::filesystem::rename(tmp, dir / name, ec);
    if (ec) return Internal("cannot write " + (dir / name).string() + ": " + ec.message());
  }
  report(steps);
  return summary;
}

}  // namespace txscore::llm
