#include "llm/sentencepiece_model.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "llm/utf8.h"

namespace txscore::llm {
namespace {

using json = nlohmann::json;

// Protobuf wire format (https://protobuf.dev/programming-guides/encoding/), bounds-checked.
// Offsets in errors are from the start of the file, so nested messages carry their base.
class WireReader {
 public:
  enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

  WireReader(std::string_view in, size_t base, const std::string* source) : in_(in), base_(base), source_(source) {}

  bool done() const { return pos_ == in_.size(); }

  Status Tag(uint32_t* field, int* wire_type) {
    uint64_t tag = 0;
    TXSCORE_RETURN_IF_ERROR(Varint(&tag));
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<int>(tag & 7);
    if (*field == 0) return Fail("field number 0");
    return Status::Ok();
  }

  Status Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return Fail("the input ends inside a varint");
      const uint8_t byte = static_cast<uint8_t>(in_[pos_++]);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return Status::Ok();
    }
    return Fail("a varint is longer than 10 bytes");
  }

  Status Fixed32(uint32_t* value) {
    if (in_.size() - pos_ < 4) return Fail("the input ends inside a 32-bit value");
    *value = 0;
    for (int i = 0; i < 4; ++i) *value |= static_cast<uint32_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return Status::Ok();
  }

  // A length-delimited field; *offset is where its bytes start in the file.
  Status Bytes(std::string_view* bytes, size_t* offset = nullptr) {
    uint64_t length = 0;
    TXSCORE_RETURN_IF_ERROR(Varint(&length));
    if (length > in_.size() - pos_) return Fail("a field's length runs past the end of its message");
    if (offset != nullptr) *offset = base_ + pos_;
    *bytes = in_.substr(pos_, length);
    pos_ += length;
    return Status::Ok();
  }

  Status Skip(int wire_type) {
    switch (wire_type) {
      case kVarint: {
        uint64_t ignored = 0;
        return Varint(&ignored);
      }
      case kFixed64:
        if (in_.size() - pos_ < 8) return Fail("the input ends inside a 64-bit value");
        pos_ += 8;
        return Status::Ok();
      case kLengthDelimited: {
        std::string_view ignored;
        return Bytes(&ignored);
      }
      case kFixed32: {
        uint32_t ignored = 0;
        return Fixed32(&ignored);
      }
      default:
        return Fail("unsupported wire type " + std::to_string(wire_type));
    }
  }

  // Reads a field whose wire type must be `expected`.
  Status Expect(int wire_type, int expected, uint32_t field) {
    if (wire_type != expected)
      return Fail("field " + std::to_string(field) + " has wire type " + std::to_string(wire_type));
    return Status::Ok();
  }

  Error Fail(const std::string& what) const {
    return DataLoss(*source_ + ": malformed SentencePiece model at byte " + std::to_string(base_ + pos_) + ": " + what);
  }

 private:
  std::string_view in_;
  size_t base_;
  size_t pos_ = 0;
  const std::string* source_;
};

// Calls `on_field(reader, field, wire_type)` for each field of the message in `bytes`; the
// callback reads the fields it knows and skips the rest with reader.Skip(wire_type).
template <typename OnField>
Status ForEachField(std::string_view bytes, size_t base, const std::string& source, OnField on_field) {
  WireReader r(bytes, base, &source);
  while (!r.done()) {
    uint32_t field = 0;
    int wire = 0;
    TXSCORE_RETURN_IF_ERROR(r.Tag(&field, &wire));
    TXSCORE_RETURN_IF_ERROR(on_field(r, field, wire));
  }
  return Status::Ok();
}

Status ReadVarintField(WireReader& r, uint32_t field, int wire, uint64_t* value) {
  TXSCORE_RETURN_IF_ERROR(r.Expect(wire, WireReader::kVarint, field));
  return r.Varint(value);
}

Status ReadBoolField(WireReader& r, uint32_t field, int wire, bool* out) {
  uint64_t v = 0;
  TXSCORE_RETURN_IF_ERROR(ReadVarintField(r, field, wire, &v));
  *out = v != 0;
  return Status::Ok();
}

// An enum whose known values are 1..max.
template <typename Enum>
Status ReadEnumField(WireReader& r, uint32_t field, int wire, int max, const char* what, Enum* out) {
  uint64_t v = 0;
  TXSCORE_RETURN_IF_ERROR(ReadVarintField(r, field, wire, &v));
  if (v < 1 || v > static_cast<uint64_t>(max)) return r.Fail(std::string("unknown ") + what + " " + std::to_string(v));
  *out = static_cast<Enum>(v);
  return Status::Ok();
}

Status ReadBytesField(WireReader& r, uint32_t field, int wire, std::string_view* out, size_t* offset = nullptr) {
  TXSCORE_RETURN_IF_ERROR(r.Expect(wire, WireReader::kLengthDelimited, field));
  return r.Bytes(out, offset);
}

// ModelProto.SentencePiece: 1 piece, 2 score, 3 type.
Status ParsePiece(std::string_view bytes, size_t base, const std::string& source, SentencePieceModel::Piece* piece) {
  return ForEachField(bytes, base, source, [&](WireReader& r, uint32_t field, int wire) -> Status {
    if (field == 1) {
      std::string_view text;
      TXSCORE_RETURN_IF_ERROR(ReadBytesField(r, field, wire, &text));
      piece->text = std::string(text);
      return Status::Ok();
    }
    if (field == 2) {
      TXSCORE_RETURN_IF_ERROR(r.Expect(wire, WireReader::kFixed32, field));
      uint32_t bits = 0;
      TXSCORE_RETURN_IF_ERROR(r.Fixed32(&bits));
      std::memcpy(&piece->score, &bits, sizeof bits);
      return Status::Ok();
    }
    if (field == 3) return ReadEnumField(r, field, wire, 6, "piece type", &piece->type);
    return r.Skip(wire);
  });
}

// TrainerSpec: 3 model_type, 24 treat_whitespace_as_suffix, 35 byte_fallback.
Status ParseTrainerSpec(std::string_view bytes, size_t base, const std::string& source, SentencePieceModel* model) {
  return ForEachField(bytes, base, source, [&](WireReader& r, uint32_t field, int wire) -> Status {
    if (field == 3) return ReadEnumField(r, field, wire, 4, "model type", &model->model_type);
    if (field == 24) return ReadBoolField(r, field, wire, &model->treat_whitespace_as_suffix);
    if (field == 35) return ReadBoolField(r, field, wire, &model->byte_fallback);
    return r.Skip(wire);
  });
}

// NormalizerSpec: 1 name, 2 precompiled_charsmap, 3 add_dummy_prefix, 4 remove_extra_whitespaces,
// 5 escape_whitespaces.
Status ParseNormalizerSpec(std::string_view bytes, size_t base, const std::string& source, SentencePieceModel* model) {
  return ForEachField(bytes, base, source, [&](WireReader& r, uint32_t field, int wire) -> Status {
    if (field == 1 || field == 2) {
      std::string_view value;
      TXSCORE_RETURN_IF_ERROR(ReadBytesField(r, field, wire, &value));
      if (field == 1) model->normalizer_name = std::string(value);
      if (field == 2) model->precompiled_charsmap_bytes = value.size();
      return Status::Ok();
    }
    if (field == 3) return ReadBoolField(r, field, wire, &model->add_dummy_prefix);
    if (field == 4) return ReadBoolField(r, field, wire, &model->remove_extra_whitespaces);
    if (field == 5) return ReadBoolField(r, field, wire, &model->escape_whitespaces);
    return r.Skip(wire);
  });
}

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";  // "▁", SentencePiece's visible space

json StringPattern(const std::string& s) { return json{{"String", s}}; }
json RegexPattern(const std::string& s) { return json{{"Regex", s}}; }

}  // namespace

Result<SentencePieceModel> ParseSentencePieceModel(std::string_view bytes, const std::string& source) {
  // ModelProto: 1 pieces (repeated), 2 trainer_spec, 3 normalizer_spec.
  SentencePieceModel model;
  Status parsed = ForEachField(bytes, 0, source, [&](WireReader& r, uint32_t field, int wire) -> Status {
    if (field < 1 || field > 3) return r.Skip(wire);
    std::string_view message;
    size_t offset = 0;
    TXSCORE_RETURN_IF_ERROR(ReadBytesField(r, field, wire, &message, &offset));
    if (field == 2) return ParseTrainerSpec(message, offset, source, &model);
    if (field == 3) return ParseNormalizerSpec(message, offset, source, &model);
    model.pieces.emplace_back();
    return ParsePiece(message, offset, source, &model.pieces.back());
  });
  if (!parsed.ok()) return parsed.error();
  if (model.pieces.empty())
    return DataLoss(source + ": a SentencePiece model without pieces (is this a tokenizer.model?)");
  return model;
}

Result<std::string> SentencePieceToTokenizerJson(const SentencePieceModel& model, const std::string& source) {
  using Type = SentencePieceModel::PieceType;
  if (model.model_type != SentencePieceModel::ModelType::kBpe) {
    static const char* kNames[] = {"", "unigram", "bpe", "word", "char"};
    return FailedPrecondition(source + ": SentencePiece " + kNames[static_cast<int>(model.model_type)] +
                              " models are not supported, only BPE (as Llama 2 and Gemma use); "
                              "a tokenizer.json for the same model works");
  }
  if (model.precompiled_charsmap_bytes > 0 && model.normalizer_name != "identity") {
    return FailedPrecondition(source + ": the \"" + model.normalizer_name +
                              "\" normalizer (a precompiled character map) is not supported, only \"identity\"; "
                              "a tokenizer.json for the same model works");
  }
  if (model.treat_whitespace_as_suffix) {
    return FailedPrecondition(source + ": treat_whitespace_as_suffix is not supported");
  }

  json vocab = json::object();
  json added = json::array();
  std::unordered_map<std::string, int32_t> ids;
  std::string unk_token;
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const SentencePieceModel::Piece& piece = model.pieces[id];
    if (piece.text.empty()) return DataLoss(source + ": piece " + std::to_string(id) + " is empty");
    if (!ids.emplace(piece.text, static_cast<int32_t>(id)).second) {
      return DataLoss(source + ": piece \"" + piece.text + "\" appears twice");
    }
    vocab[piece.text] = id;
    if (piece.type == Type::kUnknown) unk_token = piece.text;
    if (piece.type == Type::kControl || piece.type == Type::kUnknown || piece.type == Type::kUserDefined) {
      added.push_back({{"id", id},
                       {"content", piece.text},
                       {"special", piece.type != Type::kUserDefined},
                       {"lstrip", false},
                       {"rstrip", false}});
    }
  }

  // Merges: every normal piece that splits into two pieces the BPE could have built it from,
  // the highest-scoring result first (ties: lower id first, as the vocabulary was learnt).
  auto mergeable = [&](const std::string& text) {
    auto it = ids.find(text);
    if (it == ids.end()) return false;
    const Type t = model.pieces[static_cast<size_t>(it->second)].type;
    return t == Type::kNormal || t == Type::kUserDefined;
  };
  std::vector<int32_t> order;
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    if (model.pieces[id].type == Type::kNormal) order.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return model.pieces[static_cast<size_t>(a)].score > model.pieces[static_cast<size_t>(b)].score;
  });
  json merges = json::array();
  for (int32_t id : order) {
    const std::string& text = model.pieces[static_cast<size_t>(id)].text;
    const std::vector<std::string_view> chars = SplitUtf8(text);
    size_t split = 0;
    for (size_t i = 0; i + 1 < chars.size(); ++i) {
      split += chars[i].size();
      std::string left = text.substr(0, split), right = text.substr(split);
      if (mergeable(left) && mergeable(right)) merges.push_back(json::array({std::move(left), std::move(right)}));
    }
  }

  // Normalizer, in SentencePiece's order: drop extra spaces, add the dummy prefix, make spaces visible.
  json normalizers = json::array();
  if (model.remove_extra_whitespaces) {
    normalizers.push_back({{"type", "Replace"}, {"pattern", RegexPattern("^ +| +$")}, {"content", ""}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", RegexPattern(" {2,}")}, {"content", " "}});
  }
  if (model.add_dummy_prefix)
    normalizers.push_back({{"type", "Prepend"}, {"prepend", model.escape_whitespaces ? kSpaceSymbol : " "}});
  if (model.escape_whitespaces) {
    normalizers.push_back({{"type", "Replace"}, {"pattern", StringPattern(" ")}, {"content", kSpaceSymbol}});
  }
  json decoders = json::array();
  if (model.escape_whitespaces) {
    decoders.push_back({{"type", "Replace"}, {"pattern", StringPattern(kSpaceSymbol)}, {"content", " "}});
  }
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (model.add_dummy_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});

  json bpe = {{"type", "BPE"},
              {"vocab", std::move(vocab)},
              {"merges", std::move(merges)},
              {"byte_fallback", model.byte_fallback},
              {"fuse_unk", true}};
  if (!unk_token.empty()) bpe["unk_token"] = unk_token;
  json doc = {{"version", "1.0"},
              {"added_tokens", std::move(added)},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}}},
              {"pre_tokenizer", nullptr},
              {"model", std::move(bpe)},
              {"decoder", {{"type", "Sequence"}, {"decoders", std::move(decoders)}}}};
  try {
    return doc.dump();
  } catch (const json::exception&) {  // nlohmann refuses to write strings that are not UTF-8
    return DataLoss(source + ": a piece is not valid UTF-8");
  }
}

}  // namespace txscore::llm
