// The pipeline file loader (pipelines/config.h): any text, YAML or not (wrong types, deep
// nesting, anchors and aliases), must be accepted or refused with an error, never crash or hang.
// An accepted pipeline must have a graph whose order names every stage once.
#include "pipelines/config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto config =
      txscore::pipelines::ParsePipelineConfig(std::string(txscore::fuzz::AsText(data, size)), "/nonexistent/p.yaml");
  if (config.ok()) {
    std::vector<int> seen(config->graph.size(), 0);
    for (int i : config->graph.order()) {
      if (i < 0 || static_cast<size_t>(i) >= seen.size() || seen[static_cast<size_t>(i)]++ != 0) {
        txscore::fuzz::Fail("the graph's order is not a permutation of its stages");
      }
    }
    if (config->graph.order().size() != seen.size()) txscore::fuzz::Fail("the graph's order misses a stage");
  }
  return 0;
}
