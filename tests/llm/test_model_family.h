// A model family of the tests' own (tests/llm/model_family_test.cc, decoder_test.cc),
// registered only in registries the tests build.
#pragma once

#include <nlohmann/json.hpp>

#include "llm/families/llama.h"
#include "llm/model_family.h"

namespace txscore::llm {

// A family of the test's own, in a registry of the test's own: Llama's checkpoint template and
// defaults under another model_type, with per-head query/key norms and its weights under
// "transformer." (so every name the decoder reads comes from the family, not from shared code).
// It reads one key of its own, "txscore_test_eps", into rms_norm_eps.
class TestModelFamily final : public ModelFamily {
 public:
  std::string_view name() const override { return "txscore-test"; }
  std::vector<ConfigForm> forms() const override { return {{"txscore_test", "TxscoreTestForCausalLM", ""}}; }
  void ApplyDefaults(ModelConfig* c) const override { c->qk_norm = true; }
  Status ReadFamilyKeys(const ConfigKeys& keys, ModelConfig* c) const override {
    return keys.Double("txscore_test_eps", &c->rms_norm_eps);
  }
  std::vector<WeightNames> weight_layouts() const override {
    return {WeightNames{"transformer.", "transformer.head.weight"}};
  }
  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& d) const override {
    CheckpointTemplate t = MakeLlamaFamily()->MakeCheckpointTemplate(d);
    t.config["model_type"] = "txscore_test";
    t.config["architectures"] = nlohmann::json::array({"TxscoreTestForCausalLM"});
    t.config["txscore_test_eps"] = 1e-3;
    return t;
  }
};

}  // namespace txscore::llm
