// A Hugging Face tokenizer, read from tokenizer.json as the hub ships it.
//
// The file is read generically, part by part, as the Hugging Face `tokenizers` library
// defines them:
//   added tokens     split out of the raw text first (longest match; lstrip/rstrip honoured);
//   normalizer       NFC, NFKC, Replace (string or regex), Prepend, Lowercase, Sequence;
//   pre-tokenizer    Split (regex or string; Isolated, Removed, MergedWithPrevious,
//                    MergedWithNext, Contiguous; invert), ByteLevel, Sequence;
//   model            BPE with merges as "a b" strings or [a, b] pairs, byte-level or with
//                    byte fallback (<0xNN> tokens), ignore_merges;
//   decoder          ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence.
// Regexes run on PCRE2 (UTF + Unicode properties), normalisation on ICU. Any other part type
// is refused at load with an error naming it. No special tokens are added around the text
// (no BOS): prompt builders add what their model wants.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

struct EncodeOptions {
  // Recognise special tokens (e.g. "<|im_start|>") written in the text, as Hugging Face does
  // by default. Text that comes from users (claim narratives) must be encoded with false, so
  // it cannot forge control tokens. Default: true.
  bool parse_special = true;
};

struct DecodeOptions {
  bool skip_special = false;  // Default: false, special tokens are rendered as their text
};

class Tokenizer {
 public:
  // A tokenizer.json, or a SentencePiece model when the name ends in ".model" (see
  // llm/sentencepiece_model.h for what is read from those).
  static Result<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  static Result<std::unique_ptr<Tokenizer>> FromJson(const std::string& json_text, const std::string& source);
  // DIR/tokenizer.json, or DIR/tokenizer.model where there is no tokenizer.json.
  static Result<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  ~Tokenizer();

  // Thread-safe.
  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  std::string Decode(const std::vector<int32_t>& ids, const DecodeOptions& options = {}) const;

  // The pieces the model sees for `text` (no added-token handling): normalised, pre-tokenized,
  // byte-mapped where the pre-tokenizer says so. Used by the BPE trainer.
  std::vector<std::string> PreTokenize(std::string_view text) const;

  // Number of ids (vocabulary plus added tokens): every id is below this.
  int32_t vocab_size() const;
  std::optional<int32_t> TokenId(std::string_view token) const;
  // The token as the vocabulary writes it ("Ġthe", "<|im_end|>"); empty for an unused id.
  const std::string& TokenString(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The bytes a token adds to the text after other tokens (so "▁the" of a SentencePiece model
  // is " the", though a text starting with it decodes to "the"); empty for special tokens.
  // Constrained decoding builds on this.
  std::string TokenBytes(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GPT-2's byte-level alphabet: the printable character that stands for `byte` in byte-level
// vocabularies ("Ġ" for the space).
const std::string& ByteLevelCharacter(uint8_t byte);

}  // namespace txscore::llm
