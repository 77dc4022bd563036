#include "llm/tokenizer.h"

#include "common/file_io.h"
#include "llm/chat_template.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "llm/sentencepiece_model.h"
#include "llm/utf8.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

// `node[key]` (`node` an object), or `fallback` when it has none, without copying it:
// json::value returns a copy of the whole subtree, a vocabulary of 150,000 tokens or a nesting
// deep enough to overflow the stack while it is copied (Tokenizer.RefusesSequencesNestedTooDeep
// under AddressSanitizer at -O0).
const json kNull;
const json kEmptyObject = json::object();
const json kEmptyArray = json::array();
const json& MemberOf(const json& node, const char* key, const json& fallback) {
  const auto it = node.find(key);
  return it == node.end() ? fallback : *it;
}

// GPT-2's reversible map from bytes to printable code points: printable Latin-1 bytes stand
// for themselves, the others are moved to U+0100 and up.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_char;
  std::unordered_map<std::string, uint8_t> char_to_byte;
  ByteLevelTable() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      AppendUtf8(printable ? b : next++, &byte_to_char[b]);
      char_to_byte[byte_to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteLevelTable& ByteLevel() {
  static const ByteLevelTable table;
  return table;
}

// ---------------------------------------------------------------------------------------
// Regex (PCRE2): the one place PCRE2 is used.

class Regex {
 public:
  static Result<std::shared_ptr<Regex>> Compile(const std::string& pattern, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return InvalidArgument(where + ": regex does not compile at offset " + std::to_string(offset) + ": " +
                             reinterpret_cast<char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
    return std::shared_ptr<Regex>(new Regex(code));
  }
  ~Regex() { pcre2_code_free(code_); }

  // Non-overlapping matches as [begin, end) byte ranges, left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> matches;
    pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t start = 0;
    while (start <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                                 PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
      const size_t begin = ovector[0], end = ovector[1];
      if (end == begin) {  // empty match: step over one character
        if (begin >= text.size()) break;
        start = begin + Utf8SequenceLength(static_cast<unsigned char>(text[begin]));
        continue;
      }
      matches.emplace_back(begin, end);
      start = end;
    }
    pcre2_match_data_free(data);
    return matches;
  }

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

// A pattern that is either a literal string or a regex, as tokenizer.json writes
// {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;

  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const {
    if (regex) return regex->FindAll(text);
    std::vector<std::pair<size_t, size_t>> matches;
    if (literal.empty()) return matches;
    for (size_t pos = text.find(literal); pos != std::string_view::npos;
         pos = text.find(literal, pos + literal.size())) {
      matches.emplace_back(pos, pos + literal.size());
    }
    return matches;
  }
};

Result<Pattern> ParsePattern(const json& node, const std::string& where) {
  Pattern p;
  if (node.is_object() && node.contains("String") && node["String"].is_string()) {
    p.literal = node["String"].get<std::string>();
    return p;
  }
  if (node.is_object() && node.contains("Regex") && node["Regex"].is_string()) {
    Result<std::shared_ptr<Regex>> regex = Regex::Compile(node["Regex"].get<std::string>(), where);
    if (!regex.ok()) return regex.error();
    p.regex = std::move(regex).value();
    return p;
  }
  return InvalidArgument(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

// How deep Sequences may nest inside each other. Real tokenizers nest one level; a crafted
// file nesting thousands took minutes and gigabytes.
constexpr int kMaxSequenceDepth = 8;
constexpr int32_t kMaxTokenId = 1 << 24;  // 16.7M: a hundred times the largest vocabularies
thread_local int sequence_depth = 0;      // of the ParseSequence calls on this thread's stack

// The parts of a {"type": "Sequence", key: [...]} node, each parsed by `parse`.
template <typename Part, typename ParseFn>
Result<std::vector<std::unique_ptr<Part>>> ParseSequence(const json& node, const char* key, const std::string& where,
                                                         ParseFn parse) {
  if (sequence_depth >= kMaxSequenceDepth) {
    return InvalidArgument(where + ": Sequences nest more than " + std::to_string(kMaxSequenceDepth) + " deep");
  }
  struct DepthGuard {
    DepthGuard() { ++sequence_depth; }
    ~DepthGuard() { --sequence_depth; }
  } guard;
  std::vector<std::unique_ptr<Part>> parts;
  static const json kNoParts = json::array();
  const auto found = node.find(key);  // not node.value(): that copies the whole subtree
  const json& list = found != node.end() ? *found : kNoParts;
  for (size_t i = 0; i < list.size(); ++i) {
    Result<std::unique_ptr<Part>> part = parse(list[i], where + "." + key + "[" + std::to_string(i) + "]");
    if (!part.ok()) return part.error();
    if (*part) parts.push_back(std::move(part).value());
  }
  return parts;
}

// ---------------------------------------------------------------------------------------
// Normalizers

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string Apply(std::string text) const = 0;
};

class IcuNormalizer : public Normalizer {
 public:
  explicit IcuNormalizer(const icu::Normalizer2* normalizer) : normalizer_(normalizer) {}
  std::string Apply(std::string text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString normalized = normalizer_->normalize(
        icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))), status);
    if (U_FAILURE(status)) return text;
    std::string out;
    normalized.toUTF8String(out);
    return out;
  }

 private:
  const icu::Normalizer2* normalizer_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string Apply(std::string text) const override {
    icu::UnicodeString u =
        icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    std::string out;
    u.toLower().toUTF8String(out);
    return out;
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string Apply(std::string text) const override {
    std::string out;
    size_t last = 0;
    for (const auto& [begin, end] : pattern_.FindAll(text)) {
      out.append(text, last, begin - last);
      out += content_;
      last = end;
    }
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Apply(std::string text) const override { return text.empty() ? text : prefix_ + text; }

 private:
  std::string prefix_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string Apply(std::string text) const override {
    for (const auto& part : parts_) text = part->Apply(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

Result<std::unique_ptr<Normalizer>> ParseNormalizer(const json& node, const std::string& where) {
  if (node.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = node.value("type", "");
  UErrorCode status = U_ZERO_ERROR;
  if (type == "NFC") return std::unique_ptr<Normalizer>(new IcuNormalizer(icu::Normalizer2::getNFCInstance(status)));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new IcuNormalizer(icu::Normalizer2::getNFKCInstance(status)));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new IcuNormalizer(icu::Normalizer2::getNFDInstance(status)));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new IcuNormalizer(icu::Normalizer2::getNFKDInstance(status)));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Replace") {
    Result<Pattern> pattern = ParsePattern(node.value("pattern", json()), where + ".pattern");
    if (!pattern.ok()) return pattern.error();
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern).value(), node.value("content", "")));
  }
  if (type == "Prepend") return std::unique_ptr<Normalizer>(new PrependNormalizer(node.value("prepend", "")));
  if (type == "Sequence") {
    auto parts = ParseSequence<Normalizer>(node, "normalizers", where, ParseNormalizer);
    if (!parts.ok()) return parts.error();
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts).value()));
  }
  return FailedPrecondition(where + ": normalizer type \"" + type + "\" is not supported");
}

// ---------------------------------------------------------------------------------------
// Pre-tokenizers: turn the list of pieces into a finer list.

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void Apply(std::vector<std::string>* pieces) const = 0;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void Apply(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    for (const std::string& piece : *pieces) SplitOne(piece, &out);
    *pieces = std::move(out);
  }

 private:
  void SplitOne(const std::string& text, std::vector<std::string>* out) const {
    // Alternate (span, is_match) over the whole text.
    std::vector<std::pair<std::string_view, bool>> spans;
    size_t last = 0;
    const std::string_view view(text);
    for (const auto& [begin, end] : pattern_.FindAll(view)) {
      if (begin > last) spans.emplace_back(view.substr(last, begin - last), invert_);
      spans.emplace_back(view.substr(begin, end - begin), !invert_);
      last = end;
    }
    if (last < view.size()) spans.emplace_back(view.substr(last), invert_);

    std::vector<std::string> result;
    bool previous_was_match = false;
    bool attach_to_next = false;
    for (const auto& [span, is_match] : spans) {
      switch (behavior_) {
        case SplitBehavior::kIsolated:
          result.emplace_back(span);
          break;
        case SplitBehavior::kRemoved:
          if (!is_match) result.emplace_back(span);
          break;
        case SplitBehavior::kMergedWithPrevious:  // a match joins the piece before it, unless that was a match
          if (is_match && !previous_was_match && !result.empty()) {
            result.back() += span;
          } else {
            result.emplace_back(span);
          }
          break;
        case SplitBehavior::kMergedWithNext:  // whatever follows a match joins it
          if (attach_to_next) {
            result.back() += span;
          } else {
            result.emplace_back(span);
          }
          attach_to_next = is_match;
          break;
        case SplitBehavior::kContiguous:
          if (is_match && previous_was_match && !result.empty()) {
            result.back() += span;
          } else {
            result.emplace_back(span);
          }
          break;
      }
      previous_was_match = is_match;
    }
    for (auto& r : result) {
      if (!r.empty()) out->push_back(std::move(r));
    }
  }

  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's own split, used when a ByteLevel pre-tokenizer has use_regex = true.
constexpr char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<SplitPreTokenizer> split)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)) {}

  void Apply(std::vector<std::string>* pieces) const override {
    if (add_prefix_space_ && !pieces->empty() && !pieces->front().empty() && pieces->front()[0] != ' ') {
      pieces->front().insert(0, " ");
    }
    if (split_) split_->Apply(pieces);
    const ByteLevelTable& table = ByteLevel();
    for (std::string& piece : *pieces) {
      std::string mapped;
      for (unsigned char c : piece) mapped += table.byte_to_char[c];
      piece = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void Apply(std::vector<std::string>* pieces) const override {
    for (const auto& part : parts_) part->Apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& node, const std::string& where, bool* byte_level) {
  if (node.is_null()) return std::unique_ptr<PreTokenizer>();
  const std::string type = node.value("type", "");
  if (type == "Split") {
    Result<Pattern> pattern = ParsePattern(node.value("pattern", json()), where + ".pattern");
    if (!pattern.ok()) return pattern.error();
    static const std::map<std::string, SplitBehavior> kBehaviors = {
        {"Isolated", SplitBehavior::kIsolated},
        {"Removed", SplitBehavior::kRemoved},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    auto behavior = kBehaviors.find(node.value("behavior", ""));
    if (behavior == kBehaviors.end()) {
      return FailedPrecondition(where + ": Split behavior \"" + node.value("behavior", "") + "\" is not supported");
    }
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(pattern).value(), behavior->second, node.value("invert", false)));
  }
  if (type == "ByteLevel") {
    *byte_level = true;
    std::unique_ptr<SplitPreTokenizer> split;
    if (node.value("use_regex", true)) {
      Result<std::shared_ptr<Regex>> regex = Regex::Compile(kGpt2Pattern, where);
      if (!regex.ok()) return regex.error();
      split =
          std::make_unique<SplitPreTokenizer>(Pattern{"", std::move(regex).value()}, SplitBehavior::kIsolated, false);
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(node.value("add_prefix_space", false), std::move(split)));
  }
  if (type == "Sequence") {
    auto parts = ParseSequence<PreTokenizer>(
        node, "pretokenizers", where,
        [byte_level](const json& part, const std::string& at) { return ParsePreTokenizer(part, at, byte_level); });
    if (!parts.ok()) return parts.error();
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts).value()));
  }
  return FailedPrecondition(where + ": pre_tokenizer type \"" + type + "\" is not supported");
}

// ---------------------------------------------------------------------------------------
// Decoders: turn token strings back into text pieces.

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>* tokens) const = 0;
};

class ByteLevelDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    const ByteLevelTable& table = ByteLevel();
    for (std::string& token : *tokens) {
      std::string bytes;
      for (std::string_view c : SplitUtf8(token)) {
        auto it = table.char_to_byte.find(std::string(c));
        if (it != table.char_to_byte.end()) {
          bytes.push_back(static_cast<char>(it->second));
        } else {
          bytes += c;  // added tokens are not byte-mapped
        }
      }
      token = std::move(bytes);
    }
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : replace_(std::move(pattern), std::move(content)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) token = replace_.Apply(std::move(token));
  }

 private:
  ReplaceNormalizer replace_;
};

// "<0x41>" -> "A": byte-fallback tokens become their byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        const int value = std::stoi(token.substr(3, 2), nullptr, 16);
        token = std::string(1, static_cast<char>(value));
      }
    }
  }
};

class FuseDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, all);
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content` from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void Apply(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& token : *tokens) {
      for (int i = 0; i < start_ && token.compare(0, content_.size(), content_) == 0; ++i)
        token.erase(0, content_.size());
      for (int i = 0; i < stop_ && token.size() >= content_.size() &&
                      token.compare(token.size() - content_.size(), content_.size(), content_) == 0;
           ++i) {
        token.erase(token.size() - content_.size());
      }
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (const auto& part : parts_) part->Apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

Result<std::unique_ptr<Decoder>> ParseDecoder(const json& node, const std::string& where) {
  if (node.is_null()) return std::unique_ptr<Decoder>();
  const std::string type = node.value("type", "");
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    return std::unique_ptr<Decoder>(
        new StripDecoder(node.value("content", ""), node.value("start", 0), node.value("stop", 0)));
  }
  if (type == "Replace") {
    Result<Pattern> pattern = ParsePattern(node.value("pattern", json()), where + ".pattern");
    if (!pattern.ok()) return pattern.error();
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern).value(), node.value("content", "")));
  }
  if (type == "Sequence") {
    auto parts = ParseSequence<Decoder>(node, "decoders", where, ParseDecoder);
    if (!parts.ok()) return parts.error();
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts).value()));
  }
  return FailedPrecondition(where + ": decoder type \"" + type + "\" is not supported");
}

// ---------------------------------------------------------------------------------------
// Post-processors: for the ids of one sequence, only the special tokens they put around it
// matter (offsets and type ids are not kept), so each is read into the tokens it adds.

struct SpecialTokenFrame {
  std::vector<int32_t> before;
  std::vector<int32_t> after;
};

// More than any real template adds (one or two); a crafted file could otherwise put
// millions of ids around every text.
constexpr size_t kMaxFrameTokens = 64;

bool FrameTooLarge(const SpecialTokenFrame& frame) {
  return frame.before.size() + frame.after.size() > kMaxFrameTokens;
}
std::string FrameTooLargeMessage(const std::string& where) {
  return where + ": adds more than " + std::to_string(kMaxFrameTokens) + " special tokens around a text";
}

// The ids of `name` in TemplateProcessing's special_tokens map, each checked against the
// vocabulary.
Result<std::vector<int32_t>> TemplateSpecialTokenIds(const json& special_tokens, const std::string& name,
                                                     const std::string& where, int32_t vocab_size) {
  const auto entry = special_tokens.find(name);
  if (entry == special_tokens.end()) {
    return InvalidArgument(where + ": special token \"" + name + "\" is not in special_tokens");
  }
  const std::string at = where + ": special_tokens[\"" + name + "\"]";
  const auto ids = entry->is_object() ? entry->find("ids") : entry->end();
  if (!entry->is_object() || ids == entry->end() || !ids->is_array() || ids->empty()) {
    return InvalidArgument(at + " must hold a non-empty list of \"ids\"");
  }
  if (ids->size() > kMaxFrameTokens) return InvalidArgument(FrameTooLargeMessage(at));
  const auto tokens = entry->find("tokens");
  if (tokens != entry->end() && (!tokens->is_array() || tokens->size() != ids->size())) {
    return InvalidArgument(at + ": \"ids\" and \"tokens\" differ in length");
  }
  std::vector<int32_t> out;
  for (const json& id : *ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return InvalidArgument(at + ": id " + id.dump() + " is outside the vocabulary (0.." +
                             std::to_string(vocab_size - 1) + ")");
    }
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

// TemplateProcessing's `single` template: special tokens before and after sequence A.
Result<std::unique_ptr<SpecialTokenFrame>> ParseTemplateProcessing(const json& node, const std::string& where,
                                                                   int32_t vocab_size) {
  const auto single = node.find("single");
  if (single == node.end() || !single->is_array()) return InvalidArgument(where + ": \"single\" must be a list");
  static const json kNoSpecialTokens = json::object();
  const auto found = node.find("special_tokens");
  const json& special_tokens = found != node.end() && !found->is_null() ? *found : kNoSpecialTokens;
  if (!special_tokens.is_object()) return InvalidArgument(where + ": \"special_tokens\" must be an object");
  auto frame = std::make_unique<SpecialTokenFrame>();
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const std::string at = where + ".single[" + std::to_string(i) + "]";
    const bool one_key = piece.is_object() && piece.size() == 1;
    if (one_key && piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
        piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string()) {
      Result<std::vector<int32_t>> ids =
          TemplateSpecialTokenIds(special_tokens, piece["SpecialToken"]["id"].get<std::string>(), at, vocab_size);
      if (!ids.ok()) return ids.error();
      std::vector<int32_t>& side = seen_sequence ? frame->after : frame->before;
      side.insert(side.end(), ids->begin(), ids->end());
      if (FrameTooLarge(*frame)) return InvalidArgument(FrameTooLargeMessage(where));
    } else if (one_key && piece.contains("Sequence") && piece["Sequence"].is_object()) {
      // "B" names the second text of a pair: it belongs in `pair`, never in `single`.
      if (piece["Sequence"].value("id", json()) != "A") {
        return InvalidArgument(at + ": the single-sequence template can only hold sequence \"A\"");
      }
      if (seen_sequence) return InvalidArgument(at + ": sequence \"A\" appears twice");
      seen_sequence = true;
    } else {
      return InvalidArgument(
          at + ": a template piece is {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": {\"id\": \"A\"}}");
    }
  }
  if (!seen_sequence) return InvalidArgument(where + ": \"single\" has no {\"Sequence\": {\"id\": \"A\"}}");
  return frame;
}

Result<std::unique_ptr<SpecialTokenFrame>> ParsePostProcessor(const json& node, const std::string& where,
                                                              int32_t vocab_size) {
  if (node.is_null()) return std::make_unique<SpecialTokenFrame>();
  if (!node.is_object()) return InvalidArgument(where + ": must be an object or null");
  const std::string type = node.value("type", "");
  // ByteLevel's post-processing only trims offsets (trim_offsets): the ids stay as they are.
  if (type == "ByteLevel") return std::make_unique<SpecialTokenFrame>();
  if (type == "TemplateProcessing") return ParseTemplateProcessing(node, where, vocab_size);
  if (type == "Sequence") {
    auto parts = ParseSequence<SpecialTokenFrame>(
        node, "processors", where,
        [vocab_size](const json& part, const std::string& at) { return ParsePostProcessor(part, at, vocab_size); });
    if (!parts.ok()) return parts.error();
    // Each processor wraps what the ones before it produced.
    auto frame = std::make_unique<SpecialTokenFrame>();
    for (const auto& part : *parts) {
      frame->before.insert(frame->before.begin(), part->before.begin(), part->before.end());
      frame->after.insert(frame->after.end(), part->after.begin(), part->after.end());
      if (FrameTooLarge(*frame)) return InvalidArgument(FrameTooLargeMessage(where));
    }
    return frame;
  }
  return FailedPrecondition(where + ": post_processor type \"" + type + "\" is not supported");
}

// ---------------------------------------------------------------------------------------
// The BPE model.

class BpeModel {
 public:
  static Result<std::unique_ptr<BpeModel>> Parse(const json& node, const std::string& where) {
    if (node.value("type", "BPE") != "BPE") {
      return FailedPrecondition(where + ": model type \"" + node.value("type", "") + "\" is not supported (BPE only)");
    }
    auto model = std::make_unique<BpeModel>();
    const json& vocab = MemberOf(node, "vocab", kEmptyObject);
    if (!vocab.is_object() || vocab.empty()) return InvalidArgument(where + ".vocab must be a non-empty object");
    for (const auto& [token, id] : vocab.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidArgument(where + ".vocab: id of \"" + token + "\" is not a valid id");
      }
      model->vocab_[token] = static_cast<int32_t>(id.get<int64_t>());
    }
    const json& merges = MemberOf(node, "merges", kEmptyArray);
    int32_t rank = 0;
    for (const json& merge : merges) {
      std::string left, right;
      if (merge.is_string()) {  // "a b"
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ', 1);
        if (space == std::string::npos) return InvalidArgument(where + ".merges: \"" + text + "\" is not \"a b\"");
        left = text.substr(0, space);
        right = text.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {  // [a, b]
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        return InvalidArgument(where + ".merges: entry " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
      }
      auto l = model->vocab_.find(left), r = model->vocab_.find(right), m = model->vocab_.find(left + right);
      if (l == model->vocab_.end() || r == model->vocab_.end() || m == model->vocab_.end()) {
        return InvalidArgument(where + ".merges: \"" + left + "\" + \"" + right +
                               "\" uses tokens not in the vocabulary");
      }
      model->merges_.emplace(PairKey(l->second, r->second), std::make_pair(rank++, m->second));
    }
    model->byte_fallback_ = node.value("byte_fallback", false);
    model->ignore_merges_ = node.value("ignore_merges", false);
    model->fuse_unk_ = node.value("fuse_unk", false);
    if (node.contains("unk_token") && node["unk_token"].is_string()) {
      auto unk = model->vocab_.find(node["unk_token"].get<std::string>());
      if (unk != model->vocab_.end()) model->unk_id_ = unk->second;
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      auto it = node.find(key);
      if (it != node.end() && it->is_string() && !it->get<std::string>().empty()) {
        return FailedPrecondition(where + ": " + key + " is not supported");
      }
    }
    if (model->byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        auto it = model->vocab_.find(name);
        if (it == model->vocab_.end())
          return InvalidArgument(where + ": byte_fallback needs token " + std::string(name));
        model->byte_ids_[b] = it->second;
      }
    }
    return model;
  }

  void Encode(std::string_view word, std::vector<int32_t>* out) const {
    if (ignore_merges_) {
      auto whole = vocab_.find(std::string(word));
      if (whole != vocab_.end()) {
        out->push_back(whole->second);
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      auto cached = cache_.find(std::string(word));
      if (cached != cache_.end()) {
        out->insert(out->end(), cached->second.begin(), cached->second.end());
        return;
      }
    }
    std::vector<int32_t> symbols;
    for (std::string_view c : SplitUtf8(word)) {
      auto it = vocab_.find(std::string(c));
      if (it != vocab_.end()) {
        symbols.push_back(it->second);
      } else if (byte_fallback_) {
        for (unsigned char b : c) symbols.push_back(byte_ids_[b]);
      } else if (unk_id_ && !(fuse_unk_ && !symbols.empty() && symbols.back() == *unk_id_)) {
        symbols.push_back(*unk_id_);
      }
    }
    MergeByRank(&symbols);
    out->insert(out->end(), symbols.begin(), symbols.end());
    // Words without a pre-tokenizer (SentencePiece models) can be whole texts: keep those out.
    if (word.size() > kMaxCachedWordBytes) return;
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() > kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(symbols));
  }

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  // Repeatedly merges the adjacent pair with the lowest rank, the leftmost among equals. A heap
  // of candidate pairs over a linked list of symbols keeps this O(n log n) in the word length,
  // which matters when a word is a whole paragraph.
  void MergeByRank(std::vector<int32_t>* symbols) const {
    const size_t n = symbols->size();
    if (n < 2) return;
    std::vector<int32_t>& ids = *symbols;
    std::vector<size_t> prev(n), next(n);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = i - 1;  // wraps to SIZE_MAX for the first: "none"
      next[i] = i + 1;  // n: "none"
    }
    constexpr size_t kNone = static_cast<size_t>(-1);
    struct Candidate {
      int32_t rank;
      size_t left;
      int32_t left_id, right_id;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto consider = [&](size_t left) {
      if (left == kNone || next[left] >= n) return;
      auto it = merges_.find(PairKey(ids[left], ids[next[left]]));
      if (it != merges_.end()) heap.push({it->second.first, left, ids[left], ids[next[left]]});
    };
    for (size_t i = 0; i + 1 < n; ++i) consider(i);
    std::vector<bool> removed(n, false);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const size_t right = next[c.left];
      // Stale when either symbol changed since the candidate was pushed.
      if (removed[c.left] || right >= n || ids[c.left] != c.left_id || ids[right] != c.right_id) continue;
      ids[c.left] = merges_.at(PairKey(c.left_id, c.right_id)).second;
      removed[right] = true;
      next[c.left] = next[right];
      if (next[right] < n) prev[next[right]] = c.left;
      consider(prev[c.left]);
      consider(c.left);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!removed[i]) ids[kept++] = ids[i];
    }
    ids.resize(kept);
  }

  static constexpr size_t kMaxCacheEntries = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 256;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // pair -> (rank, merged id)
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;  // a run of unknown characters becomes one unknown token
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
  bool lstrip;
  bool rstrip;
};

bool IsSpaceByte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// tokenizer_config.json's `token_key` (bos_token, eos_token) as an id when its `flag_key`
// (add_bos_token, add_eos_token) is true; nullopt when the flag is false or absent. The token
// is written as a string or, by older transformers, as an AddedToken object {"content": ...}.
Result<std::optional<int32_t>> ConfigSpecialToken(const json& config, const char* flag_key, const char* token_key,
                                                  const std::string& path, const Tokenizer& tokenizer) {
  const auto flag = config.find(flag_key);
  if (flag == config.end() || flag->is_null()) return std::optional<int32_t>();
  if (!flag->is_boolean()) return InvalidArgument(path + ": " + flag_key + " must be true or false");
  if (!flag->get<bool>()) return std::optional<int32_t>();
  const auto token = config.find(token_key);
  const json* content = token == config.end() ? nullptr : &*token;
  if (content != nullptr && content->is_object() && content->contains("content")) content = &(*content)["content"];
  if (content == nullptr || !content->is_string()) {
    return InvalidArgument(path + ": " + flag_key + " is true but " + token_key + " is not a token");
  }
  const std::optional<int32_t> id = tokenizer.TokenId(content->get<std::string>());
  if (!id) {
    return InvalidArgument(path + ": " + token_key + " \"" + content->get<std::string>() +
                           "\" is not in the vocabulary");
  }
  return id;
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;  // longest first
  std::vector<std::string> id_to_token;
  std::vector<bool> special;
  std::string empty;
  int32_t anchor_id = 0;                              // the first ordinary token with text of its own; see TokenBytes
  SpecialTokenFrame special_frame;                    // what add_special_tokens puts around a text
  std::vector<std::string> special_texts;             // the special added tokens, longest first
  std::shared_ptr<const ChatTemplate> chat_template;  // tokenizer_config.json's, or null

  // Encodes text that holds no added tokens.
  void EncodePlain(std::string_view text, std::vector<int32_t>* out) const {
    if (text.empty()) return;
    std::string normalized = normalizer ? normalizer->Apply(std::string(text)) : std::string(text);
    std::vector<std::string> pieces{std::move(normalized)};
    if (pre_tokenizer) pre_tokenizer->Apply(&pieces);
    for (const std::string& piece : pieces) model->Encode(piece, out);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  for (const AddedToken& a : impl_->added) {
    if (a.special) impl_->special_texts.push_back(a.content);
  }
}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  Result<std::string> read = ReadFileBounded(path, size_t{512} << 20, "tokenizer file");
  if (!read.ok()) return read.error();
  std::stringstream text;
  text << *read;
  if (path.ends_with(".model")) {
    Result<SentencePieceModel> model = ParseSentencePieceModel(text.str(), path);
    if (!model.ok()) return model.error();
    Result<std::string> converted = SentencePieceToTokenizerJson(*model, path);
    if (!converted.ok()) return converted.error();
    return FromJson(*converted, path);
  }
  return FromJson(text.str(), path);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& json_text, const std::string& source) {
  const json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(source + ": not a JSON object");
  auto impl = std::make_unique<Impl>();
  try {
    Result<std::unique_ptr<Normalizer>> normalizer =
        ParseNormalizer(MemberOf(doc, "normalizer", kNull), source + ": normalizer");
    if (!normalizer.ok()) return normalizer.error();
    impl->normalizer = std::move(normalizer).value();
    bool byte_level = false;
    Result<std::unique_ptr<PreTokenizer>> pre =
        ParsePreTokenizer(MemberOf(doc, "pre_tokenizer", kNull), source + ": pre_tokenizer", &byte_level);
    if (!pre.ok()) return pre.error();
    impl->pre_tokenizer = std::move(pre).value();
    if (!doc.contains("model")) return InvalidArgument(source + ": no \"model\"");
    Result<std::unique_ptr<BpeModel>> model = BpeModel::Parse(doc["model"], source + ": model");
    if (!model.ok()) return model.error();
    impl->model = std::move(model).value();
    Result<std::unique_ptr<Decoder>> decoder = ParseDecoder(MemberOf(doc, "decoder", kNull), source + ": decoder");
    if (!decoder.ok()) return decoder.error();
    impl->decoder = std::move(decoder).value();

    int32_t max_id = -1;
    for (const auto& [token, id] : impl->model->vocab()) max_id = std::max(max_id, id);
    for (const json& t : MemberOf(doc, "added_tokens", kEmptyArray)) {
      AddedToken added{t.at("id").get<int32_t>(), t.at("content").get<std::string>(), t.value("special", false),
                       t.value("lstrip", false), t.value("rstrip", false)};
      if (added.content.empty() || added.id < 0)
        return InvalidArgument(source + ": an added token is empty or has a negative id");
      max_id = std::max(max_id, added.id);
      impl->added.push_back(std::move(added));
    }
    // Ids index arrays: they must stay near the number of tokens listed (real tokenizers
    // number them densely), and below an absolute bound, or one crafted id allocates gigabytes.
    const int64_t listed = static_cast<int64_t>(impl->model->vocab().size() + impl->added.size());
    if (max_id >= kMaxTokenId || max_id >= 2 * listed + 1024) {
      return InvalidArgument(source + ": token id " + std::to_string(max_id) + " is far beyond the " +
                             std::to_string(listed) + " tokens listed (ids must stay below " +
                             std::to_string(std::min<int64_t>(kMaxTokenId, 2 * listed + 1024)) + ")");
    }
    std::stable_sort(impl->added.begin(), impl->added.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    impl->id_to_token.assign(static_cast<size_t>(max_id) + 1, std::string());
    impl->special.assign(static_cast<size_t>(max_id) + 1, false);
    for (const auto& [token, id] : impl->model->vocab()) impl->id_to_token[static_cast<size_t>(id)] = token;
    for (const AddedToken& a : impl->added) {
      impl->id_to_token[static_cast<size_t>(a.id)] = a.content;
      impl->special[static_cast<size_t>(a.id)] = a.special;
    }
    // Read last: its ids are checked against the complete vocabulary.
    Result<std::unique_ptr<SpecialTokenFrame>> frame =
        ParsePostProcessor(doc.value("post_processor", json()), source + ": post_processor",
                           static_cast<int32_t>(impl->id_to_token.size()));
    if (!frame.ok()) return frame.error();
    impl->special_frame = std::move(**frame);
  } catch (const json::exception& e) {
    return InvalidArgument(source + ": unexpected structure: " + e.what());
  }
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(std::move(impl)));
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    if (!tokenizer->IsSpecial(id) && !tokenizer->Decode({id}).empty()) {
      tokenizer->impl_->anchor_id = id;
      break;
    }
  }
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  Result<std::unique_ptr<Tokenizer>> tokenizer = NotFound(dir + " has neither tokenizer.json nor tokenizer.model");
  for (const char* name : {"/tokenizer.json", "/tokenizer.model"}) {
    if (std::ifstream(dir + name).good()) {
      tokenizer = FromFile(dir + name);
      break;
    }
  }
  const std::string config_path = dir + "/tokenizer_config.json";
  if (!tokenizer.ok() || !std::ifstream(config_path).good()) return tokenizer;
  // A chat template and the added-token table make these files a few hundred kilobytes.
  Result<std::string> text = ReadFileBounded(config_path, size_t{64} << 20, "tokenizer config");
  if (!text.ok()) return text.error();
  const json config = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return InvalidArgument(config_path + ": not a JSON object");
  Result<std::optional<int32_t>> bos =
      ConfigSpecialToken(config, "add_bos_token", "bos_token", config_path, **tokenizer);
  if (!bos.ok()) return bos.error();
  Result<std::optional<int32_t>> eos =
      ConfigSpecialToken(config, "add_eos_token", "eos_token", config_path, **tokenizer);
  if (!eos.ok()) return eos.error();
  // Gemma's files say it twice (a TemplateProcessing with <bos> and add_bos_token): once is meant.
  SpecialTokenFrame& frame = (*tokenizer)->impl_->special_frame;
  if (*bos && std::find(frame.before.begin(), frame.before.end(), **bos) == frame.before.end()) {
    frame.before.insert(frame.before.begin(), **bos);
  }
  if (*eos && std::find(frame.after.begin(), frame.after.end(), **eos) == frame.after.end()) {
    frame.after.push_back(**eos);
  }
  Result<std::shared_ptr<const ChatTemplate>> chat_template = ChatTemplate::FromConfig(config, config_path);
  if (!chat_template.ok()) return chat_template.error();
  (*tokenizer)->impl_->chat_template = std::move(*chat_template);
  return tokenizer;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    for (const AddedToken& a : impl_->added) {
      if (!options.parse_special && a.special) continue;
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        found = &a;  // longest first, so the first hit is the longest
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t plain_end = pos;
    if (found->lstrip) {
      while (plain_end > plain_start && IsSpaceByte(text[plain_end - 1])) --plain_end;
    }
    impl_->EncodePlain(text.substr(plain_start, plain_end - plain_start), &ids);
    ids.push_back(found->id);
    pos += found->content.size();
    if (found->rstrip) {
      while (pos < text.size() && IsSpaceByte(text[pos])) ++pos;
    }
    plain_start = pos;
  }
  impl_->EncodePlain(text.substr(plain_start), &ids);
  if (!options.add_special_tokens) return ids;
  const SpecialTokenFrame& frame = impl_->special_frame;
  std::vector<int32_t> framed;
  framed.reserve(frame.before.size() + ids.size() + frame.after.size());
  framed.insert(framed.end(), frame.before.begin(), frame.before.end());
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.insert(framed.end(), frame.after.begin(), frame.after.end());
  return framed;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, const DecodeOptions& options) const {
  // As Hugging Face does: every token, added ones included, goes through the decoder
  // (Gemma's whitespace-run tokens are added tokens made of "▁").
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) continue;
    if (options.skip_special && impl_->special[static_cast<size_t>(id)]) continue;
    tokens.push_back(impl_->id_to_token[static_cast<size_t>(id)]);
  }
  if (impl_->decoder) impl_->decoder->Apply(&tokens);
  std::string out;
  for (const std::string& piece : tokens) out += piece;
  return out;
}

const std::string& ByteLevelCharacter(uint8_t byte) { return ByteLevel().byte_to_char[byte]; }

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || IsSpecial(id)) return "";
  // Decoded after another token, so that a decoder that strips the text's first space (the
  // dummy prefix of Llama 2 and SentencePiece models) does not touch this token's.
  const std::string anchor = Decode({impl_->anchor_id});
  const std::string both = Decode({impl_->anchor_id, id});
  if (!anchor.empty() && both.compare(0, anchor.size(), anchor) == 0) return both.substr(anchor.size());
  return Decode({id});
}

std::vector<std::string> Tokenizer::PreTokenize(std::string_view text) const {
  std::vector<std::string> pieces{impl_->normalizer ? impl_->normalizer->Apply(std::string(text)) : std::string(text)};
  if (impl_->pre_tokenizer) impl_->pre_tokenizer->Apply(&pieces);
  return pieces;
}

const std::vector<int32_t>& Tokenizer::SpecialPrefix() const { return impl_->special_frame.before; }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  for (const AddedToken& a : impl_->added) {
    if (a.content == token) return a.id;
  }
  auto it = impl_->model->vocab().find(std::string(token));
  if (it == impl_->model->vocab().end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::TokenString(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return impl_->empty;
  return impl_->id_to_token[static_cast<size_t>(id)];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[static_cast<size_t>(id)];
}

const std::vector<std::string>& Tokenizer::SpecialTokenTexts() const { return impl_->special_texts; }

const ChatTemplate* Tokenizer::chat_template() const { return impl_->chat_template.get(); }

}  // namespace txscore::llm
