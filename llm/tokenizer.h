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
//   decoder          ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence;
//   post-processor   TemplateProcessing (its single-sequence template), ByteLevel (nothing
//                    to do for ids), Sequence.
// Regexes run on PCRE2 (UTF + Unicode properties), normalisation on ICU. Any other part type
// is refused at load with an error naming it.
//
// Special tokens around the text (the BOS that Llama 3 and Gemma put first) are added only
// when EncodeOptions::add_special_tokens asks: prompts are built from several Encode calls,
// and only the first may carry them. They come from the post-processor and, read by
// FromDirectory, from tokenizer_config.json's add_bos_token / add_eos_token (Llama 2 and
// Gemma style), which add bos_token / eos_token where the post-processor does not already
// add that token. add_bos_token: false does not take away a BOS the post-processor adds (the
// file is followed, as transformers.js does). config.json's bos_token_id is not consulted:
// Qwen3 names one there but its tokenizer adds none, and its model was trained without it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

class ChatTemplate;  // llm/chat_template.h

struct EncodeOptions {
  // Recognise special tokens (e.g. "<|im_start|>") written in the text, as Hugging Face does
  // by default. Text that comes from users (claim narratives) must be encoded with false, so
  // it cannot forge control tokens. Default: true.
  bool parse_special = true;
  // Put the tokenizer's special tokens around the text, as Hugging Face's
  // add_special_tokens=True does for a single sequence: SpecialPrefix() before it and the
  // post-processor's closing tokens (none for the supported families) after it. Text that
  // already starts with a BOS gets a second one, as in Hugging Face. Default: false, the text's
  // own tokens only.
  bool add_special_tokens = false;
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
  // DIR/tokenizer.json, or DIR/tokenizer.model where there is no tokenizer.json; then
  // DIR/tokenizer_config.json, where there is one, for add_bos_token, add_eos_token and the
  // chat template (refused at load when it uses a construct llm/jinja.h does not support).
  static Result<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);
  ~Tokenizer();

  // Thread-safe.
  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  std::string Decode(const std::vector<int32_t>& ids, const DecodeOptions& options = {}) const;

  // The pieces the model sees for `text` (no added-token handling): normalised, pre-tokenized,
  // byte-mapped where the pre-tokenizer says so. Used by the BPE trainer.
  std::vector<std::string> PreTokenize(std::string_view text) const;

  // The ids add_special_tokens puts before a text: {BOS} for Llama 3 and Gemma, empty for
  // Qwen3. A prompt starts with them once.
  const std::vector<int32_t>& SpecialPrefix() const;

  // Number of ids (vocabulary plus added tokens): every id is below this.
  int32_t vocab_size() const;
  std::optional<int32_t> TokenId(std::string_view token) const;
  // The token as the vocabulary writes it ("Ġthe", "<|im_end|>"); empty for an unused id.
  const std::string& TokenString(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The texts of the special added tokens ("<|im_start|>", "<bos>"), longest first.
  const std::vector<std::string>& SpecialTokenTexts() const;
  // The chat template of tokenizer_config.json (read by FromDirectory; llm/chat_template.h),
  // or null when the checkpoint has none.
  const ChatTemplate* chat_template() const;
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
