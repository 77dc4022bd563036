#include "llm/model_family.h"

namespace txscore::llm {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

std::string WeightNames::Name(DecoderWeight weight, int64_t layer) const {
  const std::string p = model_prefix + "layers." + std::to_string(layer) + ".";
  switch (weight) {
    case DecoderWeight::kEmbedTokens:
      return model_prefix + "embed_tokens.weight";
    case DecoderWeight::kFinalNorm:
      return model_prefix + "norm.weight";
    case DecoderWeight::kLmHead:
      return lm_head;
    case DecoderWeight::kInputNorm:
      return p + "input_layernorm.weight";
    case DecoderWeight::kPostAttentionNorm:
      return p + "post_attention_layernorm.weight";
    case DecoderWeight::kPreFeedforwardNorm:
      return p + "pre_feedforward_layernorm.weight";
    case DecoderWeight::kPostFeedforwardNorm:
      return p + "post_feedforward_layernorm.weight";
    case DecoderWeight::kQProj:
      return p + "self_attn.q_proj.weight";
    case DecoderWeight::kKProj:
      return p + "self_attn.k_proj.weight";
    case DecoderWeight::kVProj:
      return p + "self_attn.v_proj.weight";
    case DecoderWeight::kOProj:
      return p + "self_attn.o_proj.weight";
    case DecoderWeight::kQBias:
      return p + "self_attn.q_proj.bias";
    case DecoderWeight::kKBias:
      return p + "self_attn.k_proj.bias";
    case DecoderWeight::kVBias:
      return p + "self_attn.v_proj.bias";
    case DecoderWeight::kQNorm:
      return p + "self_attn.q_norm.weight";
    case DecoderWeight::kKNorm:
      return p + "self_attn.k_norm.weight";
    case DecoderWeight::kGateProj:
      return p + "mlp.gate_proj.weight";
    case DecoderWeight::kUpProj:
      return p + "mlp.up_proj.weight";
    case DecoderWeight::kDownProj:
      return p + "mlp.down_proj.weight";
  }
  return p;
}

void ModelFamily::ApplyDefaults(ModelConfig*) const {}

Status ModelFamily::ReadFamilyKeys(const ConfigKeys&, ModelConfig*) const { return Status::Ok(); }

Status ModelFamily::SetSlidingLayers(const ConfigKeys&, ModelConfig*) const { return Status::Ok(); }

std::vector<WeightNames> ModelFamily::weight_layouts() const { return {WeightNames{}}; }

Status ModelFamilyRegistry::Register(std::unique_ptr<ModelFamily> family) {
  const std::string name(family->name());
  const std::vector<ConfigForm> forms = family->forms();
  for (const auto& known : families_) {
    if (known->name() == name) return FailedPrecondition("model family \"" + name + "\" is registered twice");
    for (const ConfigForm& theirs : known->forms()) {
      for (const ConfigForm& ours : forms) {
        if (ours.model_type == theirs.model_type) {
          return FailedPrecondition("model family \"" + name + "\": model_type \"" + ours.model_type +
                                    "\" is already read by family \"" + std::string(known->name()) + "\"");
        }
        if (ours.architecture == theirs.architecture) {
          return FailedPrecondition("model family \"" + name + "\": architecture \"" + ours.architecture +
                                    "\" is already read by family \"" + std::string(known->name()) + "\"");
        }
      }
    }
  }
  families_.push_back(std::move(family));
  return Status::Ok();
}

const ModelFamily* ModelFamilyRegistry::Find(std::string_view name) const {
  for (const auto& family : families_) {
    if (family->name() == name) return family.get();
  }
  return nullptr;
}

Result<DetectedFamily> ModelFamilyRegistry::Detect(std::string_view model_type,
                                                   const std::vector<std::string>& architectures,
                                                   const std::string& source) const {
  std::vector<std::string> model_types, known_architectures;
  for (const auto& family : families_) {
    for (ConfigForm& form : family->forms()) {
      if (!model_type.empty() && form.model_type == model_type) return DetectedFamily{family.get(), std::move(form)};
      model_types.push_back(form.model_type);
      known_architectures.push_back(form.architecture);
    }
  }
  if (!model_type.empty()) {
    return FailedPrecondition(source + ": model_type \"" + std::string(model_type) +
                              "\" is not supported (supported: " + Join(model_types) + ")");
  }
  for (const std::string& architecture : architectures) {
    for (const auto& family : families_) {
      for (ConfigForm& form : family->forms()) {
        if (form.architecture == architecture) return DetectedFamily{family.get(), std::move(form)};
      }
    }
  }
  return FailedPrecondition(source + ": no model_type, and none of the architectures (" + Join(architectures) +
                            ") is supported (supported: " + Join(known_architectures) + ")");
}

std::vector<std::string> ModelFamilyRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& family : families_) names.emplace_back(family->name());
  return names;
}

const ModelFamilyRegistry& BuiltinModelFamilies() {
  static const ModelFamilyRegistry* const families = [] {
    auto* registry = new ModelFamilyRegistry();
    RegisterBuiltinModelFamilies(registry);
    return registry;
  }();
  return *families;
}

}  // namespace txscore::llm
