#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "llm/json_constraint.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"
#include "llm/tokenizer_trainer.h"

namespace txscore::llm {
namespace {

constexpr char kClaimSchema[] = R"({"type": "object", "properties": {
  "risk_level": {"type": "string", "enum": ["low", "medium", "high"]},
  "flags": {"type": "array", "items": {"type": "string", "enum": ["inconsistent_dates", "amount_mismatch",
            "prior_claims_pattern", "vague_description", "pressure_to_settle", "provider_anomaly", "none"]},
            "minItems": 1, "maxItems": 3},
  "summary": {"type": "string", "maxLength": 40},
  "amount": {"type": "number"},
  "count": {"type": "integer"},
  "urgent": {"type": "boolean"},
  "optional_note": {"type": "string"}},
 "required": ["risk_level", "flags", "summary", "amount", "count", "urgent"]})";

// A small byte-level tokenizer trained on the project's own generated text.
const Tokenizer& SmallTokenizer() {
  static const Tokenizer* tokenizer = [] {
    auto json = TrainByteLevelBpe(GenerateTrainingCorpus(7, 300), {.vocab_size = 400});
    return Tokenizer::FromJson(json.value(), "trained").value().release();
  }();
  return *tokenizer;
}

constexpr int32_t kEos = 399;  // any id; stands for end-of-sequence in these tests

TEST(JsonConstraint, AcceptsValidDocumentsInSchemaOrder) {
  auto c = JsonConstraint::Create(kClaimSchema, SmallTokenizer(), {kEos});
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE((*c)->Accepts(
      R"({"risk_level":"high","flags":["none"],"summary":"late report","amount":-12.5e3,"count":3,"urgent":true})"));
  EXPECT_TRUE((*c)->Accepts(
      R"({"risk_level":"low","flags":["amount_mismatch","none"],"summary":"","amount":0,"count":0,"urgent":false})"));
}

TEST(JsonConstraint, RejectsWhatTheSchemaForbids) {
  auto c = JsonConstraint::Create(kClaimSchema, SmallTokenizer(), {kEos});
  ASSERT_TRUE(c.ok());
  const char* bad[] = {
      R"({"risk_level":"severe","flags":["none"],"summary":"","amount":1,"count":1,"urgent":true})",  // enum
      R"({"risk_level":"low","flags":[],"summary":"","amount":1,"count":1,"urgent":true})",           // minItems
      R"({"risk_level":"low","flags":["none","none","none","none"],"summary":"","amount":1,"count":1,"urgent":true})",
      R"({"risk_level":"low","flags":["none"],"summary":"this summary is far longer than forty characters","amount":1,"count":1,"urgent":true})",
      R"({"risk_level":"low","flags":["none"],"summary":"a\"b","amount":1,"count":1,"urgent":true})",  // quote
      R"({"risk_level":"low","flags":["none"],"summary":"","amount":01,"count":1,"urgent":true})",     // number
      R"({"risk_level":"low","flags":["none"],"summary":"","amount":1,"count":1.5,"urgent":true})",    // integer
      R"({"flags":["none"],"risk_level":"low","summary":"","amount":1,"count":1,"urgent":true})",      // order
      R"({"risk_level":"low","flags":["none"],"summary":"","amount":1,"count":1,"urgent":true)",       // unfinished
  };
  for (const char* text : bad) EXPECT_FALSE((*c)->Accepts(text)) << text;
}

TEST(JsonConstraint, RandomTokenWalksAlwaysEndInValidDocuments) {
  // Pick uniformly among the allowed tokens (a model that ignores the prompt entirely), with
  // tight budgets: every walk must finish, parse and validate.
  const Tokenizer& tokenizer = SmallTokenizer();
  auto c = JsonConstraint::Create(kClaimSchema, tokenizer, {kEos});
  ASSERT_TRUE(c.ok());
  const size_t vocab = static_cast<size_t>(tokenizer.vocab_size());
  const size_t minimum = (*c)->MinTokensToComplete((*c)->Start());
  const std::set<std::string> flags = {"inconsistent_dates",
                                       "amount_mismatch",
                                       "prior_claims_pattern",
                                       "vague_description",
                                       "pressure_to_settle",
                                       "provider_anomaly",
                                       "none"};
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const size_t budget = minimum + seed * 3;
    Sampler sampler({.temperature = 1.0, .seed = seed});
    const std::vector<float> flat(vocab, 0.0f);
    JsonState state = (*c)->Start();
    std::vector<int32_t> ids;
    std::vector<bool> mask;
    for (size_t step = 0; step < budget && !(*c)->IsComplete(state); ++step) {
      (*c)->AllowedTokens(state, vocab, budget - step, &mask);
      const int32_t token = sampler.Sample(flat, &mask);
      ASSERT_GE(token, 0) << "no token allowed at step " << step << " (seed " << seed << ")";
      ASSERT_TRUE((*c)->Advance(&state, token));
      ids.push_back(token);
    }
    ASSERT_TRUE((*c)->IsComplete(state)) << "seed " << seed;
    const std::string text = tokenizer.Decode(ids);
    const auto doc = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << nlohmann::json(text).dump(-1, ' ', true,
                                                                  nlohmann::json::error_handler_t::replace);
    EXPECT_TRUE(doc["risk_level"] == "low" || doc["risk_level"] == "medium" || doc["risk_level"] == "high") << text;
    ASSERT_TRUE(doc["flags"].is_array());
    EXPECT_GE(doc["flags"].size(), 1u);
    EXPECT_LE(doc["flags"].size(), 3u);
    for (const auto& f : doc["flags"]) EXPECT_TRUE(flags.count(f.get<std::string>())) << text;
    EXPECT_LE(doc["summary"].get<std::string>().size(), 40u * 4);  // 40 characters of up to 4 bytes
    EXPECT_TRUE(doc["amount"].is_number());
    EXPECT_TRUE(doc["count"].is_number_integer());
    EXPECT_TRUE(doc["urgent"].is_boolean());
    EXPECT_FALSE(doc.contains("optional_note"));
  }
}

TEST(JsonConstraint, EndOfSequenceOnlyOnceComplete) {
  auto c = JsonConstraint::Create(R"({"type": "boolean"})", SmallTokenizer(), {kEos});
  ASSERT_TRUE(c.ok());
  std::vector<bool> mask;
  JsonState state = (*c)->Start();
  (*c)->AllowedTokens(state, SmallTokenizer().vocab_size(), 8, &mask);
  EXPECT_FALSE(mask[kEos]);
  for (int32_t id : SmallTokenizer().Encode("true")) ASSERT_TRUE((*c)->Advance(&state, id));
  EXPECT_TRUE((*c)->IsComplete(state));
  (*c)->AllowedTokens(state, SmallTokenizer().vocab_size(), 8, &mask);
  EXPECT_TRUE(mask[kEos]);
}

TEST(JsonConstraint, UnsupportedSchemasAreNamed) {
  EXPECT_EQ(JsonConstraint::Create(R"({"type": "null"})", SmallTokenizer(), {}).error().message,
            "schema $: type \"null\" is not supported");
  EXPECT_EQ(
      JsonConstraint::Create(R"({"type": "array", "items": {"type": "number"}})", SmallTokenizer(), {}).error().message,
      "schema $: only arrays of string enums are supported");
  EXPECT_EQ(JsonConstraint::Create("{", SmallTokenizer(), {}).error().message, "the schema is not valid JSON");
}

TEST(JsonConstraint, KeywordsItCannotHonourAreRefusedNotIgnored) {
  const auto refusal = [](const std::string& schema) {
    Result<std::unique_ptr<JsonConstraint>> c = JsonConstraint::Create(schema, SmallTokenizer(), {});
    return c.ok() ? std::string("accepted") : c.error().message;
  };
  EXPECT_EQ(refusal(R"({"type": "integer", "enum": [1, 2]})"),
            "schema $: \"enum\" is not supported for type \"integer\" (the constrained output could not honour it)");
  EXPECT_EQ(
      refusal(R"({"type": "object", "properties": {"n": {"type": "number", "maximum": 6}}, "required": ["n"]})"),
      "schema $.n: \"maximum\" is not supported for type \"number\" (the constrained output could not honour it)");
  EXPECT_EQ(refusal(R"({"type": "string", "pattern": "^a+$"})"),
            "schema $: \"pattern\" is not supported for type \"string\" (the constrained output could not honour it)");
  EXPECT_EQ(
      refusal(R"({"type": "array", "items": {"type": "string", "enum": ["a"]}, "uniqueItems": true})"),
      "schema $: \"uniqueItems\" is not supported for type \"array\" (the constrained output could not honour it)");
  EXPECT_EQ(refusal(R"({"type": "array", "items": {"type": "string", "enum": ["a"], "minLength": 1}})"),
            "schema $.items: \"minLength\" is not supported");
  // Annotations change nothing the output must be, and additionalProperties holds anyway
  // (only the schema's properties are written).
  EXPECT_EQ(refusal(R"({"type": "object", "title": "t", "description": "d", "additionalProperties": false,
                        "properties": {"s": {"type": "string", "description": "x", "maxLength": 4}}, "required": ["s"]})"),
            "accepted");
}

TEST(Sampler, GreedyTakesTheArgmaxAmongAllowed) {
  Sampler greedy({});
  EXPECT_EQ(greedy.Sample({0.1f, 3.0f, 2.0f}), 1);
  const std::vector<bool> mask = {true, false, true};
  EXPECT_EQ(greedy.Sample({0.1f, 3.0f, 2.0f}, &mask), 2);
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> logits = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  Sampler a({.temperature = 1.0, .seed = 9}), b({.temperature = 1.0, .seed = 9});
  std::vector<int32_t> from_a, from_b;
  for (int i = 0; i < 50; ++i) {
    from_a.push_back(a.Sample(logits));
    from_b.push_back(b.Sample(logits));
  }
  EXPECT_EQ(from_a, from_b);
  EXPECT_GT(std::set<int32_t>(from_a.begin(), from_a.end()).size(), 2u);  // it does sample
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {1.0f, 1.1f, 0.9f, 1.05f};
  Sampler top_k({.temperature = 2.0, .top_k = 1, .seed = 3});
  Sampler top_p({.temperature = 2.0, .top_p = 1e-6, .seed = 3});
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(top_k.Sample(logits), 1);
    EXPECT_EQ(top_p.Sample(logits), 1);
  }
}

TEST(Sampler, TopKLimitsTheCandidates) {
  const std::vector<float> logits = {5.0f, 4.9f, 0.0f, 4.8f, -1.0f};
  Sampler sampler({.temperature = 100.0, .top_k = 2, .seed = 4});
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(sampler.Sample(logits));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

}  // namespace
}  // namespace txscore::llm
