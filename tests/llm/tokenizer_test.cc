#include "llm/tokenizer.h"

#include <gtest/gtest.h>

#include "tests/test_support.h"

namespace txscore::llm {
namespace {

// A tiny byte-level BPE: vocabulary of the bytes it needs plus a few merges, in both forms.
std::string ByteLevelTokenizer(
    const std::string& merges, const std::string& added = "[]",
    const std::string& pre_tokenizer = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})") {
  return R"({"version": "1.0", "added_tokens": )" + added + R"(, "normalizer": {"type": "NFC"},
    "pre_tokenizer": )" +
         pre_tokenizer + R"(, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7,
      "he": 8, "ll": 9, "hell": 10, "hello": 11, "Ġw": 12, "or": 13, "Ġwor": 14, "Ġworld": 15, "!": 16},
      "merges": )" +
         merges + "}}";
}
constexpr char kStringMerges[] = R"(["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or"])";
constexpr char kPairMerges[] =
    R"([["h","e"], ["l","l"], ["he","ll"], ["hell","o"], ["Ġ","w"], ["o","r"], ["Ġw","or"]])";

TEST(Tokenizer, StringAndPairMergesGiveTheSameTokens) {
  auto from_strings = Tokenizer::FromJson(ByteLevelTokenizer(kStringMerges), "t.json");
  auto from_pairs = Tokenizer::FromJson(ByteLevelTokenizer(kPairMerges), "t.json");
  ASSERT_TRUE(from_strings.ok()) << from_strings.error().ToString();
  ASSERT_TRUE(from_pairs.ok());
  EXPECT_EQ((*from_strings)->Encode("hello world!"), (*from_pairs)->Encode("hello world!"));
}

TEST(Tokenizer, RejectsMergesOfTokensOutsideTheVocabulary) {
  auto t = Tokenizer::FromJson(ByteLevelTokenizer(R"(["h e", "Ġwor l"])"), "t.json");
  ASSERT_FALSE(t.ok());  // "Ġworl" is not in the vocabulary: the file is inconsistent
  EXPECT_EQ(t.error().message, "t.json: model.merges: \"Ġwor\" + \"l\" uses tokens not in the vocabulary");
}

TEST(Tokenizer, PairFormMergesEncodeAndDecode) {
  auto t = Tokenizer::FromJson(ByteLevelTokenizer(kPairMerges), "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  // "hello" -> he, ll -> hell -> hello; " world" -> Ġw + or -> Ġwor, then l, d unmerged.
  EXPECT_EQ((*t)->Encode("hello world!"), (std::vector<int32_t>{11, 14, 2, 7, 16}));
  EXPECT_EQ((*t)->Decode({11, 14, 2, 7, 16}), "hello world!");
  EXPECT_EQ((*t)->TokenString(14), "Ġwor");
  EXPECT_EQ((*t)->TokenId("Ġworld"), 15);
  EXPECT_EQ((*t)->vocab_size(), 17);
}

TEST(Tokenizer, AddedTokensAreSplitOutFirstAndCanBeRefused) {
  auto t = Tokenizer::FromJson(ByteLevelTokenizer(kPairMerges, R"([{"id": 17, "content": "<|end|>", "special": true},
                                          {"id": 18, "content": "<|end|>x", "special": true}])"),
                               "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ((*t)->Encode("hello<|end|>"), (std::vector<int32_t>{11, 17}));
  EXPECT_EQ((*t)->Encode("hello<|end|>x"), (std::vector<int32_t>{11, 18}));  // longest match wins
  EXPECT_TRUE((*t)->IsSpecial(17));
  EXPECT_EQ((*t)->Decode({11, 17}), "hello<|end|>");
  EXPECT_EQ((*t)->Decode({11, 17}, {.skip_special = true}), "hello");
  // User text must not be able to forge control tokens.
  const auto plain = (*t)->Encode("<|end|>", {.parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 17), 0);
}

TEST(Tokenizer, LstripAndRstripAbsorbWhitespace) {
  auto t = Tokenizer::FromJson(
      ByteLevelTokenizer(kPairMerges,
                         R"([{"id": 17, "content": "<m>", "special": true, "lstrip": true, "rstrip": true}])"),
      "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ((*t)->Encode("hello  <m>  hello"), (std::vector<int32_t>{11, 17, 11}));
}

TEST(Tokenizer, ByteFallbackSpellsUnknownCharactersAsBytes) {
  std::string vocab = R"({"a": 0, "▁": 1)";
  for (int b = 0; b < 256; ++b) {
    char entry[32];
    std::snprintf(entry, sizeof entry, R"(, "<0x%02X>": %d)", b, 2 + b);
    vocab += entry;
  }
  vocab += "}";
  const std::string json = R"({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]},
    "model": {"type": "BPE", "byte_fallback": true, "vocab": )" +
                           vocab + R"(, "merges": []}})";
  auto t = Tokenizer::FromJson(json, "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  // "é" is not in the vocabulary: its two UTF-8 bytes 0xC3 0xA9 become <0xC3> <0xA9>.
  EXPECT_EQ((*t)->Encode("a é"), (std::vector<int32_t>{0, 1, 2 + 0xC3, 2 + 0xA9}));
  EXPECT_EQ((*t)->Decode({0, 1, 2 + 0xC3, 2 + 0xA9}), "a é");
}

TEST(Tokenizer, SplitBehaviours) {
  auto with_split = [](const std::string& behavior) {
    return ByteLevelTokenizer(kPairMerges, "[]",
                              R"({"type": "Sequence", "pretokenizers": [
                                   {"type": "Split", "pattern": {"String": "l"}, "behavior": ")" +
                                  behavior + R"(", "invert": false},
                                   {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  };
  // "hello" split on "l", as Hugging Face's tokenizers define the behaviours: Isolated
  // he|l|l|o, Removed he|o, MergedWithPrevious hel|l|o (a match joins the piece before it
  // unless that was a match), MergedWithNext he|llo (whatever follows a match joins it),
  // Contiguous he|ll|o.
  const std::map<std::string, std::vector<int32_t>> expected = {
      {"Isolated", {8, 2, 2, 3}},    {"Removed", {8, 3}},       {"MergedWithPrevious", {8, 2, 2, 3}},
      {"MergedWithNext", {8, 9, 3}}, {"Contiguous", {8, 9, 3}},
  };
  for (const auto& [behavior, ids] : expected) {
    auto t = Tokenizer::FromJson(with_split(behavior), "t.json");
    ASSERT_TRUE(t.ok()) << behavior << ": " << t.error().ToString();
    EXPECT_EQ((*t)->Encode("hello"), ids) << behavior;
  }
}

TEST(Tokenizer, UnsupportedPartsAreNamed) {
  auto t = Tokenizer::FromJson(ByteLevelTokenizer(kPairMerges, "[]", R"({"type": "Whitespace"})"), "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().message, "t.json: pre_tokenizer: pre_tokenizer type \"Whitespace\" is not supported");
  auto wordpiece = Tokenizer::FromJson(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})", "t.json");
  ASSERT_FALSE(wordpiece.ok());
  EXPECT_EQ(wordpiece.error().message, "t.json: model: model type \"WordPiece\" is not supported (BPE only)");
}

TEST(Tokenizer, BadRegexIsReportedWithItsOffset) {
  auto t = Tokenizer::FromJson(
      ByteLevelTokenizer(kPairMerges, "[]",
                         R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"),
      "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("t.json: pre_tokenizer.pattern: regex does not compile at offset 9"),
            std::string::npos)
      << t.error().message;
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

TEST(Tokenizer, FromDirectoryPrefersTokenizerJson) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("tokenizer.model"), "not protobuf at all");
  testing::WriteFile(dir.file("tokenizer.json"), ByteLevelTokenizer(kPairMerges));
  auto from_json = Tokenizer::FromDirectory(dir.path());
  ASSERT_TRUE(from_json.ok()) << from_json.error().ToString();
  EXPECT_EQ((*from_json)->TokenBytes(14), " wor");  // "Ġwor": the byte-level space is a space
  testing::TempDir empty;
  EXPECT_EQ(Tokenizer::FromDirectory(empty.path()).error().message,
            empty.path() + " has neither tokenizer.json nor tokenizer.model");
}

TEST(Tokenizer, SpecialTokensHaveNoBytes) {
  auto t = Tokenizer::FromJson(
      ByteLevelTokenizer(kPairMerges, R"([{"id": 17, "content": "<|end|>", "special": true}])"), "t.json");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->TokenBytes(17), "");
  EXPECT_EQ((*t)->TokenBytes(11), "hello");
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

TEST(Tokenizer, RefusesTokenIdsFarBeyondTheVocabulary) {
  // 17 vocabulary tokens; an added token with id 2,000,000,000 allocated arrays of that size.
  for (const char* id : {"2000000000", "2147483647"}) {
    auto t = Tokenizer::FromJson(
        ByteLevelTokenizer(kPairMerges, std::string(R"([{"id": )") + id + R"(, "content": "<x>", "special": true}])"),
        "t.json");
    ASSERT_FALSE(t.ok()) << id;
    EXPECT_EQ(t.error().message,
              std::string("t.json: token id ") + id + " is far beyond the 18 tokens listed (ids must stay below 1060)");
  }
  std::string vocab_id = ByteLevelTokenizer(kPairMerges);
  vocab_id.replace(vocab_id.find("\"!\": 16"), 7, "\"!\": 2000000000");
  ASSERT_FALSE(Tokenizer::FromJson(vocab_id, "t.json").ok());
  // Ids just past the vocabulary, as real tokenizers number their added tokens, are fine.
  EXPECT_TRUE(Tokenizer::FromJson(ByteLevelTokenizer(kPairMerges, R"([{"id": 17, "content": "<x>", "special": true}])"),
                                  "t.json")
                  .ok());
}

TEST(Tokenizer, RefusesSequencesNestedTooDeep) {
  // A normalizer Sequence inside a Sequence, 3,000 deep (131 KB): 18 s and 1.9 GB before.
  std::string normalizer = R"({"type": "NFC"})";
  for (int i = 0; i < 3000; ++i) normalizer = R"({"type": "Sequence", "normalizers": [)" + normalizer + "]}";
  std::string text = ByteLevelTokenizer(kPairMerges);
  text.replace(text.find(R"({"type": "NFC"})"), 15, normalizer);
  auto t = Tokenizer::FromJson(text, "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("Sequences nest more than 8 deep"), std::string::npos) << t.error().message;
  // One level, as real tokenizers nest, is fine.
  std::string one = ByteLevelTokenizer(kPairMerges);
  one.replace(one.find(R"({"type": "NFC"})"), 15, R"({"type": "Sequence", "normalizers": [{"type": "NFC"}]})");
  EXPECT_TRUE(Tokenizer::FromJson(one, "t.json").ok());
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

TEST(Tokenizer, NfcComposesDecomposedTextBeforeEncoding) {
  // The test tokenizer's normalizer is NFC: "e" + combining acute (U+0301) must encode as the
  // single precomposed "é" (U+00E9) does. Only the reference tests fed decomposed text before.
  auto t = Tokenizer::FromJson(ByteLevelTokenizer(kPairMerges), "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  const std::vector<int32_t> composed = (*t)->Encode("h\xC3\xA9llo");
  const std::vector<int32_t> decomposed = (*t)->Encode("he\xCC\x81llo");
  EXPECT_EQ(decomposed, composed);
  EXPECT_NE((*t)->Encode("hello"), composed);  // the accent is not simply dropped
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

// The test tokenizer with <s> (17) and </s> (18) as special tokens and `post_processor`.
std::string WithPostProcessor(const std::string& post_processor) {
  std::string text = ByteLevelTokenizer(kPairMerges, R"([{"id": 17, "content": "<s>", "special": true},
                                                          {"id": 18, "content": "</s>", "special": true}])");
  return text.insert(1, R"("post_processor": )" + post_processor + ", ");
}
constexpr char kBosTemplate[] = R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [17], "tokens": ["<s>"]}}})";

TEST(TokenizerSpecialTokens, TemplateProcessingAddsTheBosOnlyWhenAsked) {
  auto t = Tokenizer::FromJson(WithPostProcessor(kBosTemplate), "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ((*t)->Encode("hello"), (std::vector<int32_t>{11}));  // Default: the text's own tokens
  EXPECT_EQ((*t)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{17, 11}));
  EXPECT_EQ((*t)->Encode("", {.add_special_tokens = true}), (std::vector<int32_t>{17}));
  EXPECT_EQ((*t)->SpecialPrefix(), (std::vector<int32_t>{17}));
}

TEST(TokenizerSpecialTokens, SequenceAppliesEachPostProcessorInTurn) {
  // ByteLevel leaves ids alone; a template puts </s> after A, then another <s> before that.
  auto t = Tokenizer::FromJson(WithPostProcessor(std::string(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
       "special_tokens": {"</s>": {"id": "</s>", "ids": [18], "tokens": ["</s>"]}}},
      )") + kBosTemplate + "]}"),
                               "t.json");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ((*t)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{17, 11, 18}));
  EXPECT_EQ((*t)->SpecialPrefix(), (std::vector<int32_t>{17}));
}

TEST(TokenizerSpecialTokens, ByteLevelOrNoPostProcessorAddsNothing) {
  for (const char* post_processor :
       {"null", R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false})"}) {
    auto t = Tokenizer::FromJson(WithPostProcessor(post_processor), "t.json");
    ASSERT_TRUE(t.ok()) << post_processor << ": " << t.error().ToString();
    EXPECT_EQ((*t)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{11})) << post_processor;
    EXPECT_TRUE((*t)->SpecialPrefix().empty()) << post_processor;
  }
}

TEST(TokenizerSpecialTokens, MalformedPostProcessorsAreRefusedNamingTheFault) {
  const std::string bos_piece = R"({"SpecialToken": {"id": "<s>", "type_id": 0}})";
  const std::string a_piece = R"({"Sequence": {"id": "A", "type_id": 0}})";
  auto with_template = [](const std::string& single, const std::string& special_tokens) {
    return R"({"type": "TemplateProcessing", "single": )" + single + R"(, "special_tokens": )" + special_tokens + "}";
  };
  const std::string bos_entry = R"({"<s>": {"id": "<s>", "ids": [17], "tokens": ["<s>"]}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "BertProcessing", "sep": ["</s>", 18], "cls": ["<s>", 17]})",
       "t.json: post_processor: post_processor type \"BertProcessing\" is not supported"},
      {R"({"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "RobertaProcessing"}]})",
       "t.json: post_processor.processors[1]: post_processor type \"RobertaProcessing\" is not supported"},
      {R"(["not", "an", "object"])", "t.json: post_processor: must be an object or null"},
      {with_template("[" + bos_piece + ", " + a_piece + "]", "{}"),
       "t.json: post_processor.single[0]: special token \"<s>\" is not in special_tokens"},
      {with_template("[" + bos_piece + ", " + a_piece + "]",
                     R"({"<s>": {"id": "<s>", "ids": [99], "tokens": ["<s>"]}})"),
       "t.json: post_processor.single[0]: special_tokens[\"<s>\"]: id 99 is outside the vocabulary (0..18)"},
      {with_template("[" + bos_piece + ", " + a_piece + "]",
                     R"({"<s>": {"id": "<s>", "ids": [-1], "tokens": ["<s>"]}})"),
       "t.json: post_processor.single[0]: special_tokens[\"<s>\"]: id -1 is outside the vocabulary (0..18)"},
      {with_template("[" + bos_piece + ", " + a_piece + "]",
                     R"({"<s>": {"id": "<s>", "ids": ["17"], "tokens": ["<s>"]}})"),
       "t.json: post_processor.single[0]: special_tokens[\"<s>\"]: id \"17\" is outside the vocabulary (0..18)"},
      {with_template("[" + bos_piece + ", " + a_piece + "]",
                     R"({"<s>": {"id": "<s>", "ids": [17, 17], "tokens": ["<s>"]}})"),
       "t.json: post_processor.single[0]: special_tokens[\"<s>\"]: \"ids\" and \"tokens\" differ in length"},
      {with_template("[" + bos_piece + ", " + a_piece + "]", R"({"<s>": {"id": "<s>", "ids": []}})"),
       "t.json: post_processor.single[0]: special_tokens[\"<s>\"] must hold a non-empty list of \"ids\""},
      {with_template(R"([{"Pair": {"id": "A"}}])", bos_entry),
       "t.json: post_processor.single[0]: a template piece is {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": "
       "{\"id\": \"A\"}}"},
      {with_template("[" + a_piece + R"(, {"Sequence": {"id": "B", "type_id": 1}}])", bos_entry),
       "t.json: post_processor.single[1]: the single-sequence template can only hold sequence \"A\""},
      {with_template("[" + a_piece + ", " + a_piece + "]", bos_entry),
       "t.json: post_processor.single[1]: sequence \"A\" appears twice"},
      {with_template("[" + bos_piece + "]", bos_entry),
       "t.json: post_processor: \"single\" has no {\"Sequence\": {\"id\": \"A\"}}"},
      {with_template(R"("<s> $A")", bos_entry), "t.json: post_processor: \"single\" must be a list"},
      {with_template("[" + a_piece + "]", "[]"), "t.json: post_processor: \"special_tokens\" must be an object"},
  };
  for (const auto& [post_processor, message] : cases) {
    auto t = Tokenizer::FromJson(WithPostProcessor(post_processor), "t.json");
    ASSERT_FALSE(t.ok()) << post_processor;
    EXPECT_EQ(t.error().message, message);
  }
}

TEST(TokenizerSpecialTokens, RefusesATemplateThatAddsTooManyTokens) {
  // 65 copies of <s> before every text: a crafted file could otherwise add millions.
  std::string single = "[";
  for (int i = 0; i < 65; ++i) single += R"({"SpecialToken": {"id": "<s>", "type_id": 0}}, )";
  single += R"({"Sequence": {"id": "A", "type_id": 0}}])";
  auto t = Tokenizer::FromJson(
      WithPostProcessor(R"({"type": "TemplateProcessing", "single": )" + single +
                        R"(, "special_tokens": {"<s>": {"id": "<s>", "ids": [17], "tokens": ["<s>"]}}})"),
      "t.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().message, "t.json: post_processor: adds more than 64 special tokens around a text");
}

// A directory with the test tokenizer (`post_processor` in tokenizer.json) and tokenizer_config.json.
Result<std::unique_ptr<Tokenizer>> FromDirectoryWith(const testing::TempDir& dir, const std::string& post_processor,
                                                     const std::string& config) {
  testing::WriteFile(dir.file("tokenizer.json"), WithPostProcessor(post_processor));
  testing::WriteFile(dir.file("tokenizer_config.json"), config);
  return Tokenizer::FromDirectory(dir.path());
}

TEST(TokenizerSpecialTokens, AddBosTokenFromTokenizerConfigPrependsTheBos) {
  testing::TempDir dir;
  for (const char* bos : {R"("<s>")", R"({"__type": "AddedToken", "content": "<s>", "special": true})"}) {
    auto t = FromDirectoryWith(dir, "null", std::string(R"({"add_bos_token": true, "bos_token": )") + bos + "}");
    ASSERT_TRUE(t.ok()) << bos << ": " << t.error().ToString();
    EXPECT_EQ((*t)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{17, 11})) << bos;
    EXPECT_EQ((*t)->Encode("hello"), (std::vector<int32_t>{11})) << bos;
  }
  auto without = FromDirectoryWith(dir, "null", R"({"add_bos_token": false, "bos_token": "<s>"})");
  ASSERT_TRUE(without.ok());
  EXPECT_EQ((*without)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{11}));
  // tokenizer.json alone (FromFile) knows nothing of tokenizer_config.json.
  auto file_only = Tokenizer::FromFile(dir.file("tokenizer.json"));
  ASSERT_TRUE(file_only.ok());
  EXPECT_TRUE((*file_only)->SpecialPrefix().empty());
}

TEST(TokenizerSpecialTokens, BosAskedForTwiceIsAddedOnce) {
  // Gemma's files: a TemplateProcessing with <bos> and add_bos_token: true.
  testing::TempDir dir;
  auto t = FromDirectoryWith(dir, kBosTemplate, R"({"add_bos_token": true, "bos_token": "<s>"})");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ((*t)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{17, 11}));
  EXPECT_EQ((*t)->SpecialPrefix(), (std::vector<int32_t>{17}));
}

TEST(TokenizerSpecialTokens, AddEosTokenAppendsTheEos) {
  testing::TempDir dir;
  auto t = FromDirectoryWith(dir, kBosTemplate, R"({"add_bos_token": true, "bos_token": "<s>",
                                                    "add_eos_token": true, "eos_token": "</s>"})");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ((*t)->Encode("hello", {.add_special_tokens = true}), (std::vector<int32_t>{17, 11, 18}));
  EXPECT_EQ((*t)->SpecialPrefix(), (std::vector<int32_t>{17}));  // a prompt's start has no EOS
}

TEST(TokenizerSpecialTokens, MalformedTokenizerConfigIsRefusedNamingTheFault) {
  testing::TempDir dir;
  const std::string config = dir.file("tokenizer_config.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", config + ": not a JSON object"},
      {R"({"add_bos_token": "yes", "bos_token": "<s>"})", config + ": add_bos_token must be true or false"},
      {R"({"add_bos_token": true, "bos_token": null})",
       config + ": add_bos_token is true but bos_token is not a token"},
      {R"({"add_bos_token": true})", config + ": add_bos_token is true but bos_token is not a token"},
      {R"({"add_bos_token": true, "bos_token": "<bos>"})", config + ": bos_token \"<bos>\" is not in the vocabulary"},
      {R"({"add_eos_token": true, "eos_token": {"content": 7}})",
       config + ": add_eos_token is true but eos_token is not a token"},
  };
  for (const auto& [text, message] : cases) {
    auto t = FromDirectoryWith(dir, "null", text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.error().message, message);
  }
}

}  // namespace
}  // namespace txscore::llm
