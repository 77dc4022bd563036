// The safetensors header parser (llm/safetensors.h). Input: 8 bytes of data-area size (little
// endian), then the header's JSON text. An accepted header must describe tensors that lie inside
// the data area, in offset order, each as large as its shape and type say.
#include "llm/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using txscore::fuzz::Fail;
  if (size < 8) return 0;
  uint64_t data_size = 0;
  for (int i = 7; i >= 0; --i) data_size = (data_size << 8) | data[i];
  data_size %= uint64_t{1} << 40;
  const auto header =
      txscore::llm::ParseSafetensorsHeader(txscore::fuzz::AsText(data + 8, size - 8), data_size, "fuzz");
  if (!header.ok()) return 0;
  uint64_t previous_end = 0;
  for (const txscore::llm::TensorInfo& tensor : header->tensors) {
    if (tensor.offset < previous_end) Fail("tensor " + tensor.name + " overlaps the one before it");
    if (tensor.offset + tensor.size_bytes > data_size || tensor.offset + tensor.size_bytes < tensor.offset) {
      Fail("tensor " + tensor.name + " ends past the data area");
    }
    if (tensor.size_bytes != static_cast<uint64_t>(tensor.numel()) * txscore::llm::DTypeSize(tensor.dtype)) {
      Fail("tensor " + tensor.name + "'s size does not match its shape");
    }
    previous_end = tensor.offset + tensor.size_bytes;
  }
  return 0;
}
