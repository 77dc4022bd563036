#include "llm/checkpoint_maker.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "llm/tokenizer_trainer.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

struct Dimensions {
  int64_t hidden, layers, heads, kv_heads, head_dim, intermediate, tokenizer_vocab, corpus_documents;
  int64_t config_vocab;  // 0: the tokenizer's size rounded up to a multiple of 64
  int64_t sliding_window;
};

Result<Dimensions> DimensionsFor(const std::string& size) {
  if (size == "tiny") return Dimensions{64, 2, 4, 2, 16, 128, 512, 600, 0, 8};
  if (size == "small") return Dimensions{256, 4, 8, 2, 32, 704, 2048, 3000, 0, 64};
  if (size == "0.5b") return Dimensions{896, 24, 14, 2, 64, 4864, 4096, 6000, 151936, 4096};
  return InvalidArgument("size must be tiny, small or 0.5b, not \"" + size + "\"", "size");
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

json FamilyConfig(const std::string& family, const Dimensions& d, int64_t vocab, int64_t eos, int64_t bos) {
  json c = {{"hidden_size", d.hidden},
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
  if (family == "llama") {
    c["model_type"] = "llama";
    c["architectures"] = {"LlamaForCausalLM"};
    c["hidden_act"] = "silu";
    c["head_dim"] = d.head_dim;
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    c["rms_norm_eps"] = 1e-5;
    c["hidden_size"] = d.head_dim * d.heads;
  } else if (family == "qwen3") {
    c["model_type"] = "qwen3";
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["hidden_act"] = "silu";
    c["head_dim"] = d.head_dim * 2;  // explicit and different from hidden / heads, as in Qwen3
    c["rope_theta"] = 1000000.0;
    c["use_sliding_window"] = false;
  } else if (family == "granite") {
    c["model_type"] = "granite";
    c["architectures"] = {"GraniteForCausalLM"};
    c["hidden_act"] = "silu";
    c["rope_theta"] = 10000000.0;
    c["embedding_multiplier"] = 12.0;
    c["attention_multiplier"] = 0.0625;
    c["residual_multiplier"] = 0.22;
    c["logits_scaling"] = 8.0;
    c["hidden_size"] = d.head_dim * d.heads;
  } else if (family == "gemma2") {
    c["model_type"] = "gemma2";
    c["architectures"] = {"Gemma2ForCausalLM"};
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["head_dim"] = d.head_dim;
    c["query_pre_attn_scalar"] = d.head_dim + 8;  // differs from head_dim, so the scale is exercised
    c["attn_logit_softcapping"] = 20.0;
    c["final_logit_softcapping"] = 10.0;
    c["sliding_window"] = d.sliding_window;
    c["rope_theta"] = 10000.0;
  } else if (family == "gemma3") {
    c["model_type"] = "gemma3_text";
    c["architectures"] = {"Gemma3ForCausalLM"};
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["head_dim"] = d.head_dim;
    c["query_pre_attn_scalar"] = d.head_dim + 8;
    c["attn_logit_softcapping"] = nullptr;
    c["final_logit_softcapping"] = nullptr;
    c["sliding_window"] = d.sliding_window;
    c["sliding_window_pattern"] = 2;  // with few layers, both kinds appear
    c["rope_theta"] = 1000000.0;
    c["rope_local_base_freq"] = 10000.0;
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  }
  return c;
}

// The BOS the family's real tokenizer puts before every text, as its files say it: Llama 3.x
// with a TemplateProcessing after the ByteLevel post-processor, Gemma with a TemplateProcessing
// and add_bos_token in tokenizer_config.json. Empty for families whose tokenizer adds none
// (Qwen3) or whose checkpoints here do not imitate one.
std::string FamilyBosToken(const std::string& family) {
  if (family == "llama") return "<|begin_of_text|>";
  if (family == "gemma2" || family == "gemma3") return "<bos>";
  return "";
}

json BosPostProcessor(const std::string& family, const std::string& bos, int64_t bos_id) {
  const json single = {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}};
  const json template_processing = {{"type", "TemplateProcessing"},
                                    {"single", single},
                                    {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
  if (family != "llama") return template_processing;
  return {{"type", "Sequence"},
          {"processors",
           {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
            template_processing}}};
}

}  // namespace

Result<CheckpointSummary> MakeCheckpoint(const CheckpointSpec& spec, const std::string& out_dir) {
  static const char* const kFamilies[] = {"llama", "qwen3", "granite", "gemma2", "gemma3"};
  if (std::find(std::begin(kFamilies), std::end(kFamilies), spec.family) == std::end(kFamilies)) {
    return InvalidArgument("family must be llama, qwen3, granite, gemma2 or gemma3, not \"" + spec.family + "\"",
                           "family");
  }
  Result<Dimensions> dims = DimensionsFor(spec.size);
  if (!dims.ok()) return dims.error();
  const Dimensions& d = *dims;

  BpeTrainingOptions training;
  training.vocab_size = static_cast<int>(d.tokenizer_vocab);
  const std::string bos = FamilyBosToken(spec.family);
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
  if (bos_id >= 0) {
    tokenizer_doc["post_processor"] = BosPostProcessor(spec.family, bos, bos_id);
    if (spec.family != "llama") {
      tokenizer_files.emplace_back("tokenizer_config.json",
                                   json({{"add_bos_token", true}, {"bos_token", bos}}).dump(2) + "\n");
    }
  }
  tokenizer_files.emplace_back("tokenizer.json", tokenizer_doc.dump(1));

  // Qwen3's config names <|endoftext|> as bos_token_id though its tokenizer adds no BOS, as
  // the real one does.
  json config = FamilyConfig(spec.family, d, vocab, im_end, bos_id >= 0 ? bos_id : endoftext);
  config["eos_token_id"] = {im_end, endoftext};
  const int64_t hidden = config["hidden_size"].get<int64_t>();
  const int64_t head_dim = config.contains("head_dim") ? config["head_dim"].get<int64_t>() : hidden / d.heads;
  const bool gemma = spec.family == "gemma2" || spec.family == "gemma3";
  const bool qk_norm = spec.family == "qwen3" || spec.family == "gemma3";

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
  auto norm = [&](const std::string& name, int64_t size) { return add(name, {size}, 0.1f, gemma ? 0.0f : 1.0f); };

  const int steps = static_cast<int>(d.layers) + 2;  // the embedding, each layer, writing
  auto report = [&](int done) {
    if (spec.progress) spec.progress(done, steps);
  };
  TXSCORE_RETURN_IF_ERROR(add("model.embed_tokens.weight", {vocab, hidden}, 0.5f, 0.0f));
  report(1);
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    TXSCORE_RETURN_IF_ERROR(norm(p + "input_layernorm.weight", hidden));
    TXSCORE_RETURN_IF_ERROR(norm(p + "post_attention_layernorm.weight", hidden));
    if (gemma) {
      TXSCORE_RETURN_IF_ERROR(norm(p + "pre_feedforward_layernorm.weight", hidden));
      TXSCORE_RETURN_IF_ERROR(norm(p + "post_feedforward_layernorm.weight", hidden));
    }
    TXSCORE_RETURN_IF_ERROR(linear(p + "self_attn.q_proj.weight", d.heads * head_dim, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(p + "self_attn.k_proj.weight", d.kv_heads * head_dim, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(p + "self_attn.v_proj.weight", d.kv_heads * head_dim, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(p + "self_attn.o_proj.weight", hidden, d.heads * head_dim));
    if (qk_norm) {
      TXSCORE_RETURN_IF_ERROR(norm(p + "self_attn.q_norm.weight", head_dim));
      TXSCORE_RETURN_IF_ERROR(norm(p + "self_attn.k_norm.weight", head_dim));
    }
    TXSCORE_RETURN_IF_ERROR(linear(p + "mlp.gate_proj.weight", d.intermediate, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(p + "mlp.up_proj.weight", d.intermediate, hidden));
    TXSCORE_RETURN_IF_ERROR(linear(p + "mlp.down_proj.weight", hidden, d.intermediate));
    report(static_cast<int>(l) + 2);
  }
  TXSCORE_RETURN_IF_ERROR(norm("model.norm.weight", hidden));
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
