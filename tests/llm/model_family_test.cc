#include "llm/model_family.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "llm/checkpoint_maker.h"
#include "llm/model_config.h"
#include "llm/safetensors.h"
#include "tests/llm/test_model_family.h"
#include "tests/test_support.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

// A family that claims what another already reads.
class ClashingFamily final : public ModelFamily {
 public:
  ClashingFamily(std::string name, ConfigForm form) : name_(std::move(name)), form_(std::move(form)) {}
  std::string_view name() const override { return name_; }
  std::vector<ConfigForm> forms() const override { return {form_}; }
  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions&) const override { return {}; }

 private:
  std::string name_;
  ConfigForm form_;
};

constexpr char kSizes[] = R"("vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "max_position_embeddings": 128)";

std::string Config(const std::string& identity) { return "{" + identity + ", " + kSizes + "}"; }

TEST(ModelFamilyRegistry, BuiltinFamiliesAreRegisteredInOrder) {
  EXPECT_EQ(BuiltinModelFamilies().Names(),
            (std::vector<std::string>{"llama", "qwen3", "granite", "gemma2", "gemma3"}));
}

TEST(ModelFamilyRegistry, DetectsEachBuiltinFamilyByModelType) {
  const std::pair<const char*, const char*> cases[] = {{"llama", "llama"},        {"qwen3", "qwen3"},
                                                       {"granite", "granite"},    {"gemma2", "gemma2"},
                                                       {"gemma3_text", "gemma3"}, {"gemma3", "gemma3"}};
  for (const auto& [model_type, family] : cases) {
    auto detected = BuiltinModelFamilies().Detect(model_type, {}, "config.json");
    ASSERT_TRUE(detected.ok()) << model_type << ": " << detected.error().ToString();
    EXPECT_EQ(detected->family->name(), family) << model_type;
    EXPECT_EQ(detected->form.model_type, model_type);
  }
  // Only the multimodal form nests the language model.
  EXPECT_EQ(BuiltinModelFamilies().Detect("gemma3", {}, "c")->form.text_config, "text_config");
  EXPECT_EQ(BuiltinModelFamilies().Detect("gemma3_text", {}, "c")->form.text_config, "");
}

TEST(ModelFamilyRegistry, DetectsByArchitecturesWhenThereIsNoModelType) {
  const std::pair<const char*, const char*> cases[] = {
      {"LlamaForCausalLM", "llama"},   {"Qwen3ForCausalLM", "qwen3"},   {"GraniteForCausalLM", "granite"},
      {"Gemma2ForCausalLM", "gemma2"}, {"Gemma3ForCausalLM", "gemma3"}, {"Gemma3ForConditionalGeneration", "gemma3"}};
  for (const auto& [architecture, family] : cases) {
    auto detected = BuiltinModelFamilies().Detect("", {"SomethingElse", architecture}, "config.json");
    ASSERT_TRUE(detected.ok()) << architecture << ": " << detected.error().ToString();
    EXPECT_EQ(detected->family->name(), family) << architecture;
    EXPECT_EQ(detected->form.architecture, architecture);
  }
}

TEST(ModelFamilyRegistry, ModelTypeDecidesOverArchitectures) {
  auto c = ParseModelConfig(Config(R"("model_type": "qwen3", "architectures": ["LlamaForCausalLM"])"), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "qwen3");
}

TEST(ModelFamilyRegistry, ConfigWithOnlyArchitecturesIsReadAsTheirFamily) {
  auto c = ParseModelConfig(Config(R"("architectures": ["Qwen3ForCausalLM"])"), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family->name(), "qwen3");
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_TRUE(c->qk_norm);
}

TEST(ModelFamilyRegistry, RefusesAnUnknownModelTypeNamingTheKnownOnes) {
  auto detected = BuiltinModelFamilies().Detect("mistral", {"LlamaForCausalLM"}, "m/config.json");
  ASSERT_FALSE(detected.ok());
  EXPECT_EQ(detected.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(detected.error().message,
            "m/config.json: model_type \"mistral\" is not supported "
            "(supported: llama, qwen3, granite, gemma2, gemma3_text, gemma3)");
}

TEST(ModelFamilyRegistry, RefusesUnknownArchitecturesNamingTheKnownOnes) {
  auto c = ParseModelConfig(Config(R"("architectures": ["MistralForCausalLM"])"), "m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(c.error().message,
            "m/config.json: no model_type, and none of the architectures (MistralForCausalLM) is supported "
            "(supported: LlamaForCausalLM, Qwen3ForCausalLM, GraniteForCausalLM, Gemma2ForCausalLM, "
            "Gemma3ForCausalLM, Gemma3ForConditionalGeneration)");
}

TEST(ModelFamilyRegistry, ConfigWithNeitherModelTypeNorArchitecturesNamesTheMissingKey) {
  auto c = ParseModelConfig(Config(R"("torch_dtype": "bfloat16")"), "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "c.json: missing \"model_type\"");
}

TEST(ModelFamilyRegistry, RefusesAFamilyRegisteredTwice) {
  ModelFamilyRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<TestModelFamily>()).ok());
  Status again = registry.Register(std::make_unique<TestModelFamily>());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(again.error().message, "model family \"txscore-test\" is registered twice");
  EXPECT_EQ(registry.Names(), (std::vector<std::string>{"txscore-test"}));
}

TEST(ModelFamilyRegistry, RefusesAModelTypeOrArchitectureAnotherFamilyReads) {
  ModelFamilyRegistry registry;
  RegisterBuiltinModelFamilies(&registry);
  Status model_type =
      registry.Register(std::make_unique<ClashingFamily>("llama2", ConfigForm{"llama", "Llama2ForCausalLM", ""}));
  ASSERT_FALSE(model_type.ok());
  EXPECT_EQ(model_type.error().message,
            "model family \"llama2\": model_type \"llama\" is already read by family \"llama\"");
  Status architecture =
      registry.Register(std::make_unique<ClashingFamily>("qwen", ConfigForm{"qwen", "Qwen3ForCausalLM", ""}));
  ASSERT_FALSE(architecture.ok());
  EXPECT_EQ(architecture.error().message,
            "model family \"qwen\": architecture \"Qwen3ForCausalLM\" is already read by family \"qwen3\"");
  EXPECT_EQ(registry.Names().size(), 5u);
}

TEST(ModelFamilyRegistry, ATestFamilyIsDetectedAndReadThroughItsOwnHooks) {
  ModelFamilyRegistry registry;
  RegisterBuiltinModelFamilies(&registry);
  ASSERT_TRUE(registry.Register(std::make_unique<TestModelFamily>()).ok());
  const std::string text = Config(R"("model_type": "txscore_test", "txscore_test_eps": 0.25)");
  auto c = ParseModelConfig(text, "c.json", registry);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->family, registry.Find("txscore-test"));
  EXPECT_TRUE(c->qk_norm);           // its default
  EXPECT_EQ(c->rms_norm_eps, 0.25);  // its own key
  EXPECT_EQ(c->head_dim, 8);         // the shared derivation: 32 / 4
  // The built-in registry knows nothing of it.
  auto builtin = ParseModelConfig(text, "c.json");
  ASSERT_FALSE(builtin.ok());
  EXPECT_EQ(builtin.error().message,
            "c.json: model_type \"txscore_test\" is not supported "
            "(supported: llama, qwen3, granite, gemma2, gemma3_text, gemma3)");
}

TEST(WeightNames, HuggingFaceNamesUnderThePrefix) {
  const WeightNames usual;
  EXPECT_EQ(usual.Name(DecoderWeight::kEmbedTokens), "model.embed_tokens.weight");
  EXPECT_EQ(usual.Name(DecoderWeight::kLmHead), "lm_head.weight");
  EXPECT_EQ(usual.Name(DecoderWeight::kQNorm, 3), "model.layers.3.self_attn.q_norm.weight");
  EXPECT_EQ(usual.Name(DecoderWeight::kDownProj, 0), "model.layers.0.mlp.down_proj.weight");
  const std::vector<WeightNames> gemma3 = BuiltinModelFamilies().Find("gemma3")->weight_layouts();
  ASSERT_EQ(gemma3.size(), 2u);
  EXPECT_EQ(gemma3[1].Name(DecoderWeight::kPreFeedforwardNorm, 1),
            "language_model.model.layers.1.pre_feedforward_layernorm.weight");
  EXPECT_EQ(gemma3[1].Name(DecoderWeight::kLmHead), "language_model.lm_head.weight");
}

TEST(MakeCheckpoint, UnknownFamilyIsRefusedNamingTheRegisteredOnes) {
  testing::TempDir dir;
  auto made = MakeCheckpoint({.family = "mistral"}, dir.path());
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(made.error().message, "family must be llama, qwen3, granite, gemma2 or gemma3, not \"mistral\"");
}

TEST(MakeCheckpoint, WritesATestFamilysTemplateUnderItsWeightNames) {
  ModelFamilyRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<TestModelFamily>()).ok());
  testing::TempDir dir;
  auto made = MakeCheckpoint({.family = "txscore-test", .families = &registry}, dir.path());
  ASSERT_TRUE(made.ok()) << made.error().ToString();
  std::stringstream config_text;
  config_text << std::ifstream(dir.path() + "/config.json").rdbuf();
  const json config = json::parse(config_text.str());
  EXPECT_EQ(config["model_type"], "txscore_test");
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");  // Llama's template underneath
  auto checkpoint = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().ToString();
  EXPECT_TRUE((*checkpoint)->Contains("transformer.embed_tokens.weight"));
  EXPECT_TRUE((*checkpoint)->Contains("transformer.layers.1.self_attn.k_norm.weight"));  // its qk_norm default
  EXPECT_TRUE((*checkpoint)->Contains("transformer.norm.weight"));
  EXPECT_FALSE((*checkpoint)->Contains("model.embed_tokens.weight"));
  // Tied embeddings (the shared keys): no head. 2 layers x 11 tensors, embedding, final norm.
  EXPECT_EQ((*checkpoint)->TensorNames().size(), 24u);
}

}  // namespace
}  // namespace txscore::llm
