#include "llm/families/gemma_common.h"

namespace txscore::llm::gemma {

void ApplyCommonDefaults(ModelConfig* c) {
  c->norm_weight_plus_one = true;
  c->sandwich_norms = true;
  c->embedding_scale_is_sqrt_hidden = true;
}

Status ReadCommonKeys(const ConfigKeys& keys, ModelConfig* c) {
  if (keys.IsNull("attn_logit_softcapping")) c->attn_logit_softcapping = 0;
  if (keys.IsNull("final_logit_softcapping")) c->final_logit_softcapping = 0;
  TXSCORE_RETURN_IF_ERROR(keys.Double("attn_logit_softcapping", &c->attn_logit_softcapping));
  TXSCORE_RETURN_IF_ERROR(keys.Double("final_logit_softcapping", &c->final_logit_softcapping));
  return keys.Int("sliding_window", &c->sliding_window);
}

}  // namespace txscore::llm::gemma
