// The tokenizer (llm/tokenizer.h), both ways in: the first byte chooses.
//   even: the rest is text, encoded with a real byte-level BPE tokenizer (a generated Qwen3-style
//         checkpoint's) with and without special tokens, and decoded again; ids must be in the
//         vocabulary, and ASCII text encoded without special tokens must come back byte for
//         byte (the tokenizer normalizes other text to NFC, as Qwen's does).
//   odd:  the rest is a tokenizer.json, loaded, and if accepted used on a fixed text.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "llm/checkpoint_maker.h"
#include "llm/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

std::unique_ptr<txscore::llm::Tokenizer>& RealTokenizer() {
  static std::unique_ptr<txscore::llm::Tokenizer> tokenizer;
  return tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char pattern[] = "/tmp/tokenizer_fuzz.XXXXXX";
  if (mkdtemp(pattern) == nullptr) txscore::fuzz::Fail("mkdtemp");
  const std::string dir = std::string(pattern) + "/llm";
  txscore::llm::CheckpointSpec spec;
  spec.family = "qwen3";
  spec.size = "tiny";
  if (!txscore::llm::MakeCheckpoint(spec, dir).ok()) txscore::fuzz::Fail("cannot make the tiny checkpoint");
  auto tokenizer = txscore::llm::Tokenizer::FromDirectory(dir);
  if (!tokenizer.ok()) txscore::fuzz::Fail(tokenizer.error().ToString());
  RealTokenizer() = std::move(tokenizer).value();
  std::filesystem::remove_all(pattern);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using txscore::fuzz::Fail;
  if (size == 0) return 0;
  const std::string_view rest = txscore::fuzz::AsText(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    const txscore::llm::Tokenizer& tokenizer = *RealTokenizer();
    for (bool parse_special : {false, true}) {
      txscore::llm::EncodeOptions options;
      options.parse_special = parse_special;
      const std::vector<int32_t> ids = tokenizer.Encode(rest, options);
      for (int32_t id : ids) {
        if (id < 0 || id >= tokenizer.vocab_size()) Fail("id " + std::to_string(id) + " outside the vocabulary");
      }
      const std::string decoded = tokenizer.Decode(ids);
      const bool ascii = std::all_of(rest.begin(), rest.end(), [](char c) { return (c & 0x80) == 0; });
      if (!parse_special && ascii && decoded != rest) Fail("ASCII text did not survive encode and decode");
    }
  } else {
    auto loaded = txscore::llm::Tokenizer::FromJson(std::string(rest), "fuzz");
    if (loaded.ok()) {
      const std::vector<int32_t> ids = (*loaded)->Encode("Claim 4711: water damage, Küche, 数字 <|im_end|>");
      (void)(*loaded)->Decode(ids);
    }
  }
  return 0;
}
