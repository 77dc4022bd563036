// Decoder families (Llama, Qwen3, Granite, Gemma 2, Gemma 3): what makes each differ from the
// others, in one place per family (llm/families/<name>.cc), and the registry that finds a
// family by config.json's model_type or architectures.
//
// A family says how its config.json is read (its Hugging Face defaults, its own keys, which
// layers slide), where its checkpoints keep the weights, and the checkpoint template
// `txscore llm make-checkpoint` writes for it. The forward pass (llm/decoder.cc) is shared and
// never asks which family it runs: every difference reaches it as a ModelConfig field.
//
// Adding a family: its file under llm/families/, one line in llm/families/builtin.cc and one
// in CMakeLists.txt. Tests build registries of their own with families of their own.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "llm/config_keys.h"
#include "llm/model_config.h"

namespace txscore::llm {

// One way config.json names a family's model.
struct ConfigForm {
  std::string model_type;    // config.json's "model_type" ("gemma3_text")
  std::string architecture;  // its "architectures" entry, the Hugging Face class ("Gemma3ForCausalLM")
  // The key of the object that describes the language model in a multimodal config
  // ("text_config"); empty: the top level does.
  std::string text_config;
};

// The tensors of the decoder (llm/decoder.cc reads them, llm/checkpoint_maker.cc writes them).
enum class DecoderWeight {
  kEmbedTokens,
  kFinalNorm,
  kLmHead,
  // Per layer:
  kInputNorm,
  kPostAttentionNorm,
  kPreFeedforwardNorm,   // sandwich norms
  kPostFeedforwardNorm,  // sandwich norms
  kQProj,
  kKProj,
  kVProj,
  kOProj,
  kQBias,  // attention_bias
  kKBias,
  kVBias,
  kQNorm,  // qk_norm
  kKNorm,
  kGateProj,
  kUpProj,
  kDownProj,
};

// Where one checkpoint layout keeps the decoder's tensors: Hugging Face's names
// ("model.layers.3.self_attn.q_proj.weight") under a prefix.
struct WeightNames {
  std::string model_prefix = "model.";     // Default: Hugging Face's *ForCausalLM layout
  std::string lm_head = "lm_head.weight";  // Default: the same
  // `layer` is used by the per-layer weights only.
  std::string Name(DecoderWeight weight, int64_t layer = 0) const;
};

// The sizes of a checkpoint make-checkpoint writes, chosen by --size (llm/checkpoint_maker.cc).
struct CheckpointDimensions {
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  int64_t sliding_window = 0;
};

// How a family's real tokenizer puts its BOS before every text; make-checkpoint imitates it.
enum class BosConvention {
  kNone,  // Qwen3, Granite: no BOS
  // Llama 3.x: tokenizer.json's post_processor is a Sequence of ByteLevel and a
  // TemplateProcessing.
  kAfterByteLevel,
  // Gemma: a TemplateProcessing, and add_bos_token in tokenizer_config.json.
  kTemplateAndTokenizerConfig,
};

// What make-checkpoint writes for a family beyond what every checkpoint has.
struct CheckpointTemplate {
  // config.json's keys for the family (model_type, architectures, activation, RoPE, ...) at
  // these dimensions. Written over the shared keys (sizes, vocabulary, token ids): a key here
  // replaces a shared one.
  nlohmann::json config;
  std::string bos_token;  // the BOS its tokenizer adds; empty with kNone
  BosConvention bos = BosConvention::kNone;
};

// One family. Implementations are stateless; the registry owns them. Thread-safe: const.
class ModelFamily {
 public:
  virtual ~ModelFamily() = default;

  // make-checkpoint's --family value ("gemma3").
  virtual std::string_view name() const = 0;
  // The config.json forms it reads; each model_type and architecture belongs to one family of
  // a registry.
  virtual std::vector<ConfigForm> forms() const = 0;

  // Before config.json's keys are read: the family's Hugging Face defaults (a key present
  // replaces them) and the fields that hold for every model of the family. Default: none.
  virtual void ApplyDefaults(ModelConfig* config) const;
  // After the keys every family reads (config->local_rope is then config->rope): the keys only
  // this family reads, and its own refusals. Default: none.
  virtual Status ReadFamilyKeys(const ConfigKeys& keys, ModelConfig* config) const;
  // Which layers use the sliding window when config.json has no layer_types;
  // config->layer_is_sliding holds one `false` per layer. Default: none does.
  virtual Status SetSlidingLayers(const ConfigKeys& keys, ModelConfig* config) const;

  // The checkpoint layouts the family's models come in, the usual one first; the decoder reads
  // the first whose embedding the checkpoint holds. Default: one, Hugging Face's *ForCausalLM.
  virtual std::vector<WeightNames> weight_layouts() const;

  virtual CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& dimensions) const = 0;
};

struct DetectedFamily {
  const ModelFamily* family = nullptr;
  ConfigForm form;  // the form config.json matched
};

// The families a process knows, filled by explicit Register calls
// (RegisterBuiltinModelFamilies at start-up; tests build their own). Not thread-safe while
// families are registered; read-only afterwards.
class ModelFamilyRegistry {
 public:
  // kFailedPrecondition when the family's name, or one of its model_types or architectures, is
  // already registered.
  Status Register(std::unique_ptr<ModelFamily> family);
  const ModelFamily* Find(std::string_view name) const;  // by name; null when unknown
  // By model_type when config.json gives one, else by the first of its architectures a family
  // reads. kFailedPrecondition naming what is supported when none matches; `source` names the
  // file in errors.
  Result<DetectedFamily> Detect(std::string_view model_type, const std::vector<std::string>& architectures,
                                const std::string& source) const;
  std::vector<std::string> Names() const;  // in registration order

 private:
  std::vector<std::unique_ptr<ModelFamily>> families_;  // registration order: errors list them so
};

// The families txscore ships (llm/families/builtin.cc), one registration line each.
void RegisterBuiltinModelFamilies(ModelFamilyRegistry* registry);
// A registry holding them, built on first use and never freed.
const ModelFamilyRegistry& BuiltinModelFamilies();

}  // namespace txscore::llm
