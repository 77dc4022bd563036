#include "llm/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "llm/model_family.h"
#include "tests/test_support.h"

namespace txscore::llm {
namespace {

// Configs as the Hugging Face hub ships them (abridged to the keys that matter).
constexpr char kLlama32[] = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})";

constexpr char kQwen3[] = R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16,
  "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true, "use_sliding_window": false,
  "vocab_size": 151936})";

constexpr char kGranite33[] = R"({"architectures": ["GraniteForCausalLM"], "attention_bias": false,
  "attention_multiplier": 0.015625, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "logits_scaling": 8.0,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "granite", "num_attention_heads": 32,
  "num_hidden_layers": 40, "num_key_value_heads": 8, "residual_multiplier": 0.22, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000000.0, "tie_word_embeddings": true, "vocab_size": 49159})";

constexpr char kGemma2[] = R"({"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
  "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
  "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
  "num_hidden_layers": 26, "num_key_value_heads": 4, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000})";

constexpr char kGemma3_1b[] = R"({"architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": null,
  "bos_token_id": 2, "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
  "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26,
  "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "vocab_size": 262144})";

// Multimodal Gemma 3: text_config lists only what differs from Gemma3TextConfig's defaults.
constexpr char kGemma3_4b[] = R"({"architectures": ["Gemma3ForConditionalGeneration"], "eos_token_id": [1, 106],
  "model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
  "model_type": "gemma3_text", "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
  "sliding_window": 1024}, "vision_config": {"model_type": "siglip_vision_model"}})";

TEST(ParseModelConfig, Llama32WithLlama3RopeScaling) {
  auto c = ParseModelConfig(kLlama32, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "llama");
  EXPECT_EQ(c->activation, ModelConfig::Activation::kSilu);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_query_groups(), 4);
  EXPECT_EQ(c->rope.type, "llama3");
  EXPECT_EQ(c->rope.factor, 32.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->rope.theta, 500000.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_DOUBLE_EQ(c->attention_scale(), 1.0 / 8.0);
  EXPECT_EQ(c->embedding_scale(), 1.0);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001}));
  EXPECT_EQ(c->layer_is_sliding, std::vector<bool>(16, false));
}

TEST(ParseModelConfig, Qwen3HasExplicitHeadDimAndQkNorm) {
  auto c = ParseModelConfig(kQwen3, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "qwen3");
  EXPECT_EQ(c->head_dim, 128);  // not hidden_size / heads (= 64)
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->rope.type, "default");
  EXPECT_DOUBLE_EQ(c->attention_scale(), 1.0 / std::sqrt(128.0));
}

TEST(ParseModelConfig, GraniteMultipliers) {
  auto c = ParseModelConfig(kGranite33, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "granite");
  EXPECT_EQ(c->embedding_scale(), 12.0);
  EXPECT_EQ(c->residual_multiplier, 0.22);
  EXPECT_EQ(c->logits_scaling, 8.0);
  EXPECT_EQ(c->attention_scale(), 0.015625);  // attention_multiplier, not 1/sqrt(head_dim)
  EXPECT_EQ(c->head_dim, 64);
}

TEST(ParseModelConfig, Gemma2SoftcapsAndAlternatesSlidingLayers) {
  auto c = ParseModelConfig(kGemma2, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "gemma2");
  EXPECT_EQ(c->activation, ModelConfig::Activation::kGeluTanh);
  EXPECT_TRUE(c->norm_weight_plus_one);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->attn_logit_softcapping, 50.0);
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  EXPECT_DOUBLE_EQ(c->attention_scale(), 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_DOUBLE_EQ(c->embedding_scale(), std::sqrt(2304.0));
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_TRUE(c->layer_is_sliding[0]);
  EXPECT_FALSE(c->layer_is_sliding[1]);
  EXPECT_TRUE(c->layer_is_sliding[24]);
  EXPECT_FALSE(c->layer_is_sliding[25]);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ParseModelConfig, Gemma3TextPatternLocalRopeAndNoSoftcapping) {
  auto c = ParseModelConfig(kGemma3_1b, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "gemma3");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->attn_logit_softcapping, 0.0);
  EXPECT_EQ(c->final_logit_softcapping, 0.0);
  EXPECT_EQ(c->rope.theta, 1000000.0);
  EXPECT_EQ(c->local_rope.theta, 10000.0);
  EXPECT_EQ(c->num_query_groups(), 4);
  // Five sliding layers, then one global: layers 5, 11, 17, 23 are global.
  for (int i = 0; i < 26; ++i) EXPECT_EQ(c->layer_is_sliding[i], (i + 1) % 6 != 0) << "layer " << i;
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 106}));
}

TEST(ParseModelConfig, Gemma3MultimodalReadsTextConfigOverDefaults) {
  auto c = ParseModelConfig(kGemma3_4b, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "gemma3");
  EXPECT_EQ(c->hidden_size, 2560);  // from text_config
  EXPECT_EQ(c->num_hidden_layers, 34);
  EXPECT_EQ(c->num_attention_heads, 8);  // Gemma3TextConfig default
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->vocab_size, 262208);
  EXPECT_EQ(c->rope.type, "linear");
  EXPECT_EQ(c->rope.factor, 8.0);
  EXPECT_EQ(c->local_rope.type, "default");  // sliding layers are not scaled
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 106}));
}

TEST(ParseModelConfig, LayerTypesOverrideThePattern) {
  std::string text = kGemma2;
  text.replace(
      text.find("\"sliding_window\": 4096"), 22, "\"sliding_window\": 4096, \"layer_types\": [" + [] {
        std::string list;
        for (int i = 0; i < 26; ++i)
          list += std::string(i ? ", " : "") + (i < 2 ? "\"sliding_attention\"" : "\"full_attention\"");
        return list;
      }() + "]");
  auto c = ParseModelConfig(text, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->layer_is_sliding[0]);
  EXPECT_TRUE(c->layer_is_sliding[1]);
  EXPECT_FALSE(c->layer_is_sliding[2]);
}

TEST(ParseModelConfig, UnsupportedModelTypeIsNamed) {
  auto c = ParseModelConfig(R"({"model_type": "mistral", "hidden_size": 8})", "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(c.error().message,
            "m/config.json: model_type \"mistral\" is not supported "
            "(supported: llama, qwen3, granite, gemma2, gemma3_text, gemma3)");
}

TEST(ParseModelConfig, MissingAndWrongKeysAreNamed) {
  auto missing = ParseModelConfig(R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8,
                                      "intermediate_size": 16, "num_attention_heads": 2})",
                                  "c.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "c.json: missing \"num_hidden_layers\"");
  auto wrong = ParseModelConfig(R"({"model_type": "llama", "vocab_size": "ten"})", "c.json");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().message, "c.json: \"vocab_size\" must be a non-negative integer");
  EXPECT_EQ(ParseModelConfig("[]", "c.json").error().message, "c.json: not a JSON object");
}

TEST(ParseModelConfig, GroupedQueryHeadsMustDivide) {
  std::string text = kLlama32;
  text.replace(text.find("\"num_key_value_heads\": 8"), 24, "\"num_key_value_heads\": 5");
  auto c = ParseModelConfig(text, "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "c.json: num_attention_heads (32) must be a multiple of num_key_value_heads (5)");
}

TEST(ParseModelConfig, UnsupportedRopeScalingIsNamed) {
  std::string text = kLlama32;
  text.replace(text.find("\"rope_type\": \"llama3\""), 21, "\"rope_type\": \"yarn\"");
  auto c = ParseModelConfig(text, "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "c.json: rope_scaling type \"yarn\" is not supported (supported: llama3, linear)");
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

TEST(ParseModelConfig, RefusesValuesAForwardPassCannotUse) {
  const struct {
    const char* from;
    const char* to;
    const char* message;
  } cases[] = {
      {"\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": -1e-06",
       "config.json: \"rms_norm_eps\" must be a positive number"},
      {"\"rope_theta\": 1000000", "\"rope_theta\": 0", "config.json: \"rope_theta\" must be a positive number"},
      {"\"max_position_embeddings\": 40960", "\"max_position_embeddings\": 0",
       "config.json: \"max_position_embeddings\" must be a positive integer"},
  };
  for (const auto& c : cases) {
    std::string text = kQwen3;
    text.replace(text.find(c.from), std::string(c.from).size(), c.to);
    auto parsed = ParseModelConfig(text, "config.json");
    ASSERT_FALSE(parsed.ok()) << c.to;
    EXPECT_EQ(parsed.error().message, c.message);
  }
}

TEST(CheckpointVersion, ChangesWithTheWeightsConfigOrTokenizerAndNothingElse) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("config.json"), "{}");
  testing::WriteFile(dir.file("tokenizer.json"), "{\"model\": {}}");
  testing::WriteFile(dir.file("model.safetensors"), std::string(1000, 'w'));
  testing::WriteFile(dir.file("README.md"), "about this model");
  const Result<std::string> first = CheckpointVersion(dir.path());
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->size(), 12u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos) << *first;
  EXPECT_EQ(CheckpointVersion(dir.path()).value(), *first);  // the same bytes, the same version
  testing::WriteFile(dir.file("README.md"), "edited");       // not part of the model
  EXPECT_EQ(CheckpointVersion(dir.path()).value(), *first);
  std::string weights(1000, 'w');
  weights[500] = 'x';  // one byte of the weights
  testing::WriteFile(dir.file("model.safetensors"), weights);
  const std::string retrained = CheckpointVersion(dir.path()).value();
  EXPECT_NE(retrained, *first);
  testing::WriteFile(dir.file("tokenizer.json"), "{\"model\": {\"x\": 1}}");
  const std::string retokenized = CheckpointVersion(dir.path()).value();
  EXPECT_NE(retokenized, retrained);
  // A dangling link is not part of the checkpoint, wherever the directory lists it.
  for (const char* name : {"0.json", "zz.json"}) std::filesystem::create_symlink(dir.file("nowhere"), dir.file(name));
  EXPECT_EQ(CheckpointVersion(dir.path()).value(), retokenized);
  EXPECT_EQ(CheckpointVersion(dir.file("none")).error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace txscore::llm
