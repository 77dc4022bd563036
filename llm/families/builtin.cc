// The model families txscore ships. A new family is its own file plus one line here and one in
// CMakeLists.txt (docs/llm.md, "Adding a model family").
#include "llm/families/gemma2.h"
#include "llm/families/gemma3.h"
#include "llm/families/granite.h"
#include "llm/families/llama.h"
#include "llm/families/qwen3.h"
#include "llm/model_family.h"

namespace txscore::llm {

void RegisterBuiltinModelFamilies(ModelFamilyRegistry* registry) {
  // Registration order is the order errors and --help list them in. Each is registered once
  // here; a registry that already holds one keeps the first.
  (void)registry->Register(MakeLlamaFamily());
  (void)registry->Register(MakeQwen3Family());
  (void)registry->Register(MakeGraniteFamily());
  (void)registry->Register(MakeGemma2Family());
  (void)registry->Register(MakeGemma3Family());
}

}  // namespace txscore::llm
