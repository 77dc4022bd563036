// The UBJSON checker (fraud/ubjson_check.h), which stands between a model file and XGBoost's
// own loader: any bytes must get an answer, never a crash, a hang or a huge allocation.
#include "fraud/ubjson_check.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)txscore::fraud::CheckUbjsonDocument(txscore::fuzz::AsText(data, size));
  return 0;
}
