// SentencePiece `tokenizer.model` files, read without libsentencepiece.
//
// Why our own reader: Debian's libsentencepiece links its own libprotobuf, which clashes with
// the one libtorch loads and crashes at model load. The file is a small protobuf message
// (sentencepiece_model.proto: ModelProto with pieces, trainer_spec, normalizer_spec), read here
// with a bounds-checked wire-format decoder.
//
// A BPE model is turned into the equivalent tokenizer.json, the way Hugging Face converts
// Llama 2 and Gemma tokenizers: every vocabulary piece that is the concatenation of two other
// pieces yields a merge, ranked by the merged piece's score (SentencePiece merges the adjacent
// pair whose result scores highest); whitespace becomes "▁" with a dummy prefix as the model's
// normalizer spec says; unknown characters fall back to <0xNN> byte pieces when the model was
// trained with byte_fallback. What this cannot reproduce is refused at load, naming it:
// unigram/word/char models, a precompiled normalisation map (nmt_nfkc), and whitespace as a
// suffix. Llama 2's and Gemma's tokenizer.model files use none of these.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

struct SentencePieceModel {
  enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  enum class ModelType { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };
  struct Piece {
    std::string text;
    float score = 0;
    PieceType type = PieceType::kNormal;
  };

  std::vector<Piece> pieces;                   // index = token id
  ModelType model_type = ModelType::kUnigram;  // the proto's defaults throughout
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string normalizer_name;
  size_t precompiled_charsmap_bytes = 0;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Decodes a serialized ModelProto. A truncated or malformed file is a DataLoss error naming
// `source` and the byte offset; it never reads outside `bytes`.
Result<SentencePieceModel> ParseSentencePieceModel(std::string_view bytes, const std::string& source);

// The tokenizer.json text that tokenizes like `model` (see above), or FailedPrecondition naming
// the part of the model that has no equivalent.
Result<std::string> SentencePieceToTokenizerJson(const SentencePieceModel& model, const std::string& source);

}  // namespace txscore::llm
