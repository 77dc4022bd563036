// Constrained decoding: masks the vocabulary at every step so that the model's output is
// always a JSON document valid against a schema, whatever the model and tokenizer.
//
// The schema subset (JSON Schema keywords):
//   {"type": "object", "properties": {...}, "required": [...]}   required properties are
//       emitted in the order `properties` lists them; others are left out;
//   {"type": "string", "enum": [...]}                             one of the strings;
//   {"type": "string", "minLength": m, "maxLength": n}            any text without control
//       characters, quotes or backslashes, m..n characters (default 0..256);
//   {"type": "number"} / {"type": "integer"}                      at most 16 characters and
//       two exponent digits, so the value always fits a double;
//   {"type": "boolean"};
//   {"type": "array", "items": {"type": "string", "enum": [...]}, "minItems", "maxItems"}.
// Any other keyword is refused (kFailedPrecondition, naming it and where), never ignored: the
// output could not honour it. Annotations (title, description, $schema, $id, $comment,
// examples, default) are allowed, and additionalProperties (only listed properties are written).
// Output is compact (no whitespace between tokens), so the document's shape is fixed by the
// schema and checking a byte is a small deterministic step.
//
// Per vocabulary, the tokens' bytes are arranged in a trie once; per step, a walk of that
// trie from the current state visits only byte prefixes that stay valid, so the cost grows
// with the number of valid tokens rather than the vocabulary size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

class Tokenizer;

// The matcher's position in the document. Copyable and small.
struct JsonState {
  uint32_t element = 0;      // index into the compiled program
  uint32_t offset = 0;       // bytes matched inside the element (literals, enums, numbers)
  uint32_t count = 0;        // characters of a string / items of an array so far
  uint8_t phase = 0;         // element-specific
  uint8_t pending_utf8 = 0;  // continuation bytes still expected inside a string
  uint8_t next_low = 0x80;   // range of the next continuation byte (excludes overlong forms
  uint8_t next_high = 0xbf;  // and surrogates, so the text is always valid UTF-8)
  std::string prefix;        // enum text matched so far
};

class JsonConstraint {
 public:
  // `schema` is JSON text. The tokenizer gives the bytes of each token (special tokens have
  // none and are never allowed, except the end-of-sequence ids once the document is complete).
  static Result<std::unique_ptr<JsonConstraint>> Create(const std::string& schema, const Tokenizer& tokenizer,
                                                        std::vector<int32_t> end_of_sequence_ids);
  ~JsonConstraint();

  JsonState Start() const { return {}; }
  // Tokens that keep the output a valid prefix of a schema-valid document that can still be
  // finished within the budget: `tokens_left` counts this token too. The mask covers ids
  // 0..vocab_size-1 (ids the tokenizer does not know are never allowed). With a budget of at
  // least MinTokensToComplete(Start()), generation always ends in a valid document.
  void AllowedTokens(const JsonState& state, size_t vocab_size, size_t tokens_left, std::vector<bool>* mask) const;
  // A bound on the tokens needed to finish from `state` (one byte per token, which
  // byte-level and byte-fallback vocabularies can always do).
  size_t MinTokensToComplete(const JsonState& state) const;
  // Feeds a token; false (state unchanged) if it is not allowed.
  bool Advance(JsonState* state, int32_t token) const;
  bool IsComplete(const JsonState& state) const;

  // Byte-level check of a whole text, for tests and tools.
  bool Accepts(const std::string& text) const;

 private:
  struct Impl;
  explicit JsonConstraint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace txscore::llm
