#include "llm/tokenizer_trainer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "llm/tokenizer.h"
#include "llm/utf8.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

constexpr char kSplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json TokenizerSkeleton() {
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kSplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
  };
}

// xorshift64*: small, fully specified.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 2685821657736338717ull;
  }
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  template <size_t N>
  const char* Pick(const char* const (&items)[N]) {
    return items[Int(static_cast<int>(N))];
  }
};

}  // namespace

Result<std::string> TrainByteLevelBpe(const std::vector<std::string>& corpus, const BpeTrainingOptions& options) {
  if (options.vocab_size < 256)
    return InvalidArgument("vocab_size must be at least 256 (the byte tokens)", "vocab_size");
  json doc = TokenizerSkeleton();
  json vocab = json::object();
  {
    // Start from the 256 byte tokens, in byte order.
    for (int b = 0; b < 256; ++b) vocab[ByteLevelCharacter(static_cast<uint8_t>(b))] = b;
    Result<std::unique_ptr<Tokenizer>> pre = Tokenizer::FromJson(
        [&] {
          json d = doc;
          d["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}};
          return d.dump();
        }(),
        "trainer");
    if (!pre.ok()) return pre.error();

    // Word frequencies over the corpus, each word as a list of symbols.
    std::map<std::string, int64_t> counts;
    for (const std::string& text : corpus) {
      for (const std::string& word : (*pre)->PreTokenize(text)) counts[word]++;
    }
    std::vector<std::pair<std::vector<std::string>, int64_t>> words;
    for (const auto& [word, count] : counts) {
      std::vector<std::string> symbols;
      for (std::string_view c : SplitUtf8(word)) symbols.emplace_back(c);
      words.emplace_back(std::move(symbols), count);
    }

    json merges = json::array();
    int next_id = 256;
    while (next_id < options.vocab_size) {
      std::map<std::pair<std::string, std::string>, int64_t> pairs;
      for (const auto& [symbols, count] : words) {
        for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
      }
      auto best = pairs.end();
      for (auto it = pairs.begin(); it != pairs.end(); ++it) {
        if (best == pairs.end() || it->second > best->second) best = it;  // ties: first in sort order
      }
      if (best == pairs.end() || best->second < 2) break;
      const auto [left, right] = best->first;
      const std::string merged = left + right;
      if (!vocab.contains(merged)) vocab[merged] = next_id++;
      merges.push_back({left, right});
      for (auto& [symbols, count] : words) {
        std::vector<std::string> out;
        for (size_t i = 0; i < symbols.size(); ++i) {
          if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
            out.push_back(merged);
            ++i;
          } else {
            out.push_back(symbols[i]);
          }
        }
        symbols = std::move(out);
      }
    }
    doc["model"] = {{"type", "BPE"},
                    {"dropout", nullptr},
                    {"unk_token", nullptr},
                    {"continuing_subword_prefix", ""},
                    {"end_of_word_suffix", ""},
                    {"fuse_unk", false},
                    {"byte_fallback", false},
                    {"ignore_merges", false},
                    {"vocab", vocab},
                    {"merges", merges}};
    int id = next_id;
    for (const std::string& special : options.special_tokens) {
      doc["added_tokens"].push_back({{"id", id++},
                                     {"content", special},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}});
    }
  }
  return doc.dump(1);
}

std::vector<std::string> GenerateTrainingCorpus(uint64_t seed, int documents) {
  static const char* const kClaimTypes[] = {"water damage",      "theft",        "collision", "fire", "storm damage",
                                            "medical treatment", "lost luggage", "burst pipe"};
  static const char* const kPlaces[] = {"kitchen", "garage", "basement", "office", "parking lot", "hotel", "highway"};
  static const char* const kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                        "July",    "August",   "September", "October", "November", "December"};
  static const char* const kNotes[] = {
      "The invoice is dated before the incident.", "Claimant asked twice for a quick settlement.",
      "Description is vague about what was lost.", "Same repair shop as in two earlier claims.",
      "Amount is just under the policy limit.",    "Police report number was provided.",
      "Photos match the reported damage.",         "No prior claims on this policy."};
  static const char* const kRisk[] = {"low", "medium", "high"};
  static const char* const kFlags[] = {"inconsistent_dates",
                                       "amount_mismatch",
                                       "prior_claims_pattern",
                                       "vague_description",
                                       "pressure_to_settle",
                                       "provider_anomaly",
                                       "none"};
  static const char* const kMerchants[] = {
      "grocery store", "online electronics shop", "petrol station", "casino", "jeweller", "airline", "pharmacy"};
  Rng rng{seed * 0x9e3779b97f4a7c15ull + 1};
  std::vector<std::string> corpus;
  for (int d = 0; d < documents; ++d) {
    std::string text;
    switch (d % 3) {
      case 0:
        text = "Claim C-" + std::to_string(10000 + rng.Int(90000)) + ": " + rng.Pick(kClaimTypes) + " in the " +
               rng.Pick(kPlaces) + " on " + std::to_string(1 + rng.Int(28)) + " " + rng.Pick(kMonths) + " 2026. " +
               "Amount claimed " + std::to_string(100 + rng.Int(20000)) + "." + std::to_string(10 + rng.Int(90)) +
               " EUR against a limit of " + std::to_string(5000 + 1000 * rng.Int(20)) +
               ". Adjuster notes: " + rng.Pick(kNotes) + " " + rng.Pick(kNotes);
        break;
      case 1:
        text = "Card transaction of " + std::to_string(1 + rng.Int(3000)) + "." + std::to_string(10 + rng.Int(90)) +
               " USD at a " + rng.Pick(kMerchants) + " at " + std::to_string(rng.Int(24)) + ":" +
               std::to_string(10 + rng.Int(50)) + ", " + std::to_string(rng.Int(12)) +
               " transactions in the last hour, new device: " + (rng.Int(2) ? "yes" : "no") + ".";
        break;
      default: {
        nlohmann::json findings = {{"risk_level", rng.Pick(kRisk)},
                                   {"flags", {rng.Pick(kFlags), rng.Pick(kFlags)}},
                                   {"summary", std::string(rng.Pick(kNotes)) + " " + rng.Pick(kNotes)}};
        text = findings.dump();
        break;
      }
    }
    corpus.push_back(std::move(text));
  }
  return corpus;
}

}  // namespace txscore::llm
