#include "llm/sentencepiece_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "llm/tokenizer.h"
#include "tests/test_support.h"

namespace txscore::llm {
namespace {

// A protobuf encoder just big enough to write ModelProto messages by hand.
std::string Varint(uint64_t v) {
  std::string out;
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<char>(v != 0 ? byte | 0x80 : byte));
  } while (v != 0);
  return out;
}
std::string LengthDelimited(int field, const std::string& bytes) {
  return Varint(field << 3 | 2) + Varint(bytes.size()) + bytes;
}
std::string VarintField(int field, uint64_t v) { return Varint(field << 3) + Varint(v); }
std::string FloatField(int field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  std::string out = Varint(field << 3 | 5);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
  return out;
}

struct PieceSpec {
  std::string text;
  float score;
  int type;  // 1 normal, 2 unknown, 3 control, 6 byte
};

std::string ModelProto(const std::vector<PieceSpec>& pieces, int model_type, bool byte_fallback,
                       const std::string& normalizer_name = "identity", const std::string& charsmap = "",
                       bool add_dummy_prefix = true, bool remove_extra_whitespaces = false) {
  std::string out;
  for (const PieceSpec& p : pieces) {
    out += LengthDelimited(1, LengthDelimited(1, p.text) + FloatField(2, p.score) + VarintField(3, p.type));
  }
  out += LengthDelimited(2, VarintField(3, model_type) + VarintField(35, byte_fallback ? 1 : 0) + VarintField(40, 0));
  out +=
      LengthDelimited(3, LengthDelimited(1, normalizer_name) + (charsmap.empty() ? "" : LengthDelimited(2, charsmap)) +
                             VarintField(3, add_dummy_prefix) + VarintField(4, remove_extra_whitespaces));
  return out;
}

// "▁" is SentencePiece's visible space.
std::vector<PieceSpec> SmallVocabulary() {
  std::vector<PieceSpec> pieces = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    pieces.push_back({name, 0, 6});
  }
  // ids 259...: scores fall with the id, as SentencePiece's BPE trainer writes them.
  const char* normal[] = {"\u2581t", "he", "\u2581the", "\u2581c", "la", "im", "\u2581cla", "\u2581claim", "\u2581",
                          "t",       "h",  "e",         "c",       "l",  "a",  "i",         "m",           "s"};
  float score = 0;
  for (const char* p : normal) pieces.push_back({p, score -= 1, 1});
  return pieces;
}

int32_t Id(const char* piece) {
  const auto pieces = SmallVocabulary();
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].text == piece) return static_cast<int32_t>(i);
  }
  return -1;
}

Result<std::unique_ptr<Tokenizer>> LoadModel(const std::string& proto) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("tokenizer.model"), proto);
  return Tokenizer::FromDirectory(dir.path());
}

TEST(SentencePieceModel, ReadsPiecesAndSpecs) {
  auto model = ParseSentencePieceModel(ModelProto(SmallVocabulary(), 2, true), "t.model");
  ASSERT_TRUE(model.ok()) << model.error().ToString();
  ASSERT_EQ(model->pieces.size(), 3u + 256 + 18);
  EXPECT_EQ(model->pieces[1].text, "<s>");
  EXPECT_EQ(model->pieces[1].type, SentencePieceModel::PieceType::kControl);
  EXPECT_EQ(model->pieces[259].text, "\u2581t");
  EXPECT_EQ(model->pieces[259].score, -1.0f);
  EXPECT_EQ(model->model_type, SentencePieceModel::ModelType::kBpe);
  EXPECT_TRUE(model->byte_fallback);
  EXPECT_EQ(model->normalizer_name, "identity");
  EXPECT_TRUE(model->add_dummy_prefix);
  EXPECT_FALSE(model->remove_extra_whitespaces);
}

TEST(SentencePieceModel, MergesByScoreAddsTheDummyPrefixAndFallsBackToBytes) {
  auto tokenizer = LoadModel(ModelProto(SmallVocabulary(), 2, true));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().ToString();
  // "▁the" beats "▁c"+"la"... ; "é" is not a piece: its two UTF-8 bytes.
  const std::vector<int32_t> want = {Id("\u2581the"), Id("\u2581claim"), Id("s"),
                                     Id("\u2581"),    Id("<0xC3>"),      Id("<0xA9>")};
  EXPECT_EQ((*tokenizer)->Encode("the claims \u00e9"), want);
  EXPECT_EQ((*tokenizer)->Decode(want), "the claims \u00e9");  // the dummy prefix's space is stripped again
  EXPECT_EQ((*tokenizer)->Encode("<s>", {.parse_special = true}), std::vector<int32_t>{1});
}

TEST(SentencePieceModel, TokenBytesKeepTheSpaceThatOnlyTheFirstTokenLoses) {
  auto tokenizer = LoadModel(ModelProto(SmallVocabulary(), 2, true));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().ToString();
  EXPECT_EQ((*tokenizer)->Decode({Id("\u2581the")}), "the");
  EXPECT_EQ((*tokenizer)->TokenBytes(Id("\u2581the")), " the");
  EXPECT_EQ((*tokenizer)->TokenBytes(Id("he")), "he");
  EXPECT_EQ((*tokenizer)->TokenBytes(Id("<0xC3>")), "\xC3");
  EXPECT_EQ((*tokenizer)->TokenBytes(1), "");  // <s> is a control token
}

TEST(SentencePieceModel, RemovesExtraWhitespaceWhenTheModelSaysSo) {
  auto tokenizer = LoadModel(ModelProto(SmallVocabulary(), 2, true, "identity", "", /*add_dummy_prefix=*/true,
                                        /*remove_extra_whitespaces=*/true));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().ToString();
  EXPECT_EQ((*tokenizer)->Encode("  the   claim  "), (std::vector<int32_t>{Id("\u2581the"), Id("\u2581claim")}));
}

TEST(SentencePieceModel, FusesUnknownCharactersWithoutByteFallback) {
  auto tokenizer = LoadModel(ModelProto(SmallVocabulary(), 2, false, "identity", "", /*add_dummy_prefix=*/false));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().ToString();
  EXPECT_EQ((*tokenizer)->Encode("the\u00e9\u00e9s"), (std::vector<int32_t>{Id("t"), Id("he"), 0, Id("s")}));
}

TEST(SentencePieceModel, RefusesWhatItCannotReproduce) {
  auto unigram = LoadModel(ModelProto(SmallVocabulary(), 1, true));
  ASSERT_FALSE(unigram.ok());
  EXPECT_EQ(unigram.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(unigram.error().message.find("SentencePiece unigram models are not supported, only BPE"), std::string::npos)
      << unigram.error().message;
  auto nfkc = LoadModel(ModelProto(SmallVocabulary(), 2, true, "nmt_nfkc", "charsmap bytes"));
  ASSERT_FALSE(nfkc.ok());
  EXPECT_NE(nfkc.error().message.find("the \"nmt_nfkc\" normalizer (a precompiled character map) is not supported"),
            std::string::npos)
      << nfkc.error().message;
}

TEST(SentencePieceModel, EveryTruncationIsAnErrorNeverACrash) {
  const std::vector<PieceSpec> pieces = SmallVocabulary();
  const std::string proto = ModelProto(pieces, 2, true);
  size_t accepted = 0;
  for (size_t cut = 0; cut < proto.size(); ++cut) {
    auto model = ParseSentencePieceModel(std::string_view(proto).substr(0, cut), "t.model");
    if (model.ok()) {
      ++accepted;
    } else {
      EXPECT_EQ(model.error().code, ErrorCode::kDataLoss);
    }
  }
  // A cut right after a whole top-level field is a shorter, valid message: after each piece,
  // and after the trainer spec. Every other cut is refused.
  EXPECT_EQ(accepted, pieces.size() + 1);
  auto bad = ParseSentencePieceModel(
      "\x0a\x05"
      "ab",
      "t.model");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "t.model: malformed SentencePiece model at byte 2: a field's length runs past the end of its message");
  std::vector<PieceSpec> not_utf8 = SmallVocabulary();
  not_utf8.back().text = "\xff";
  auto refused = LoadModel(ModelProto(not_utf8, 2, true));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(refused.error().message.find("a piece is not valid UTF-8"), std::string::npos) << refused.error().message;
  EXPECT_EQ(ParseSentencePieceModel("", "t.model").error().message,
            "t.model: a SentencePiece model without pieces (is this a tokenizer.model?)");
}

}  // namespace
}  // namespace txscore::llm
