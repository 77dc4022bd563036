#include "llm/json_constraint.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "llm/tokenizer.h"

namespace txscore::llm {
namespace {

// ordered_json keeps the schema's property order, which is the order properties are written.
using json = nlohmann::ordered_json;

constexpr uint32_t kMaxNumberBytes = 16;

enum class Kind { kLiteral, kEnum, kString, kNumber, kEnumArray };

// One piece of the document, in order. Objects compile to literals around their values.
struct Element {
  Kind kind = Kind::kLiteral;
  std::string literal;               // kLiteral
  std::vector<std::string> options;  // kEnum and kEnumArray items: exact texts, quotes included
  uint32_t min = 0, max = 0;         // string length in characters, or array items
  bool integer = false;              // kNumber
};

// Number grammar phases; the ones marked "end" may finish the number.
enum NumberPhase : uint8_t {
  kStart,
  kMinus,
  kZero /*end*/,
  kInt /*end*/,
  kDot,
  kFrac /*end*/,
  kExp,
  kExpSign,
  kExpDigits /*end*/
};
bool NumberCanEnd(uint8_t phase) { return phase == kZero || phase == kInt || phase == kFrac || phase == kExpDigits; }

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }

// -1 if `byte` cannot continue the number from `phase`, else the next phase.
int NumberNext(uint8_t phase, uint8_t b, bool integer) {
  const bool exponent = (b == 'e' || b == 'E') && !integer;
  switch (phase) {
    case kStart:
      return b == '-' ? kMinus : b == '0' ? kZero : IsDigit(b) ? kInt : -1;
    case kMinus:
      return b == '0' ? kZero : IsDigit(b) ? kInt : -1;
    case kZero:
      return b == '.' && !integer ? kDot : exponent ? kExp : -1;
    case kInt:
      return IsDigit(b) ? kInt : b == '.' && !integer ? kDot : exponent ? kExp : -1;
    case kDot:
      return IsDigit(b) ? kFrac : -1;
    case kFrac:
      return IsDigit(b) ? kFrac : exponent ? kExp : -1;
    case kExp:
      return b == '+' || b == '-' ? kExpSign : IsDigit(b) ? kExpDigits : -1;
    case kExpSign:
      return IsDigit(b) ? kExpDigits : -1;
    case kExpDigits:
      return IsDigit(b) ? kExpDigits : -1;
  }
  return -1;
}

bool AnyStartsWith(const std::vector<std::string>& options, const std::string& prefix) {
  return std::any_of(options.begin(), options.end(),
                     [&](const std::string& o) { return o.compare(0, prefix.size(), prefix) == 0; });
}

Status Compile(const json& node, const std::string& path, std::vector<Element>* program) {
  auto literal = [&](const std::string& text) {
    if (!program->empty() && program->back().kind == Kind::kLiteral) {
      program->back().literal += text;
    } else {
      program->push_back({Kind::kLiteral, text, {}, 0, 0, false});
    }
  };
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
    return InvalidArgument("schema " + path + " needs a \"type\"");
  }
  const std::string type = node["type"].get<std::string>();
  // A keyword this subset does not enforce is refused, never ignored: the output would not
  // validate against the caller's schema (an integer's "maximum", a string's "pattern").
  static const std::map<std::string, std::set<std::string>> kKeywords = {
      {"object", {"properties", "required", "additionalProperties"}},
      {"string", {"enum", "minLength", "maxLength"}},
      {"number", {}},
      {"integer", {}},
      {"boolean", {}},
      {"array", {"items", "minItems", "maxItems"}},
  };
  static const std::set<std::string> kAnnotations = {"type", "title",    "description", "$schema",
                                                     "$id",  "$comment", "examples",    "default"};
  if (auto keywords = kKeywords.find(type); keywords != kKeywords.end()) {
    for (const auto& [key, value] : node.items()) {
      if (kAnnotations.count(key) == 0 && keywords->second.count(key) == 0) {
        return FailedPrecondition("schema " + path + ": \"" + key + "\" is not supported for type \"" + type +
                                  "\" (the constrained output could not honour it)");
      }
    }
  }
  auto quoted_enum = [&](const json& values, std::vector<std::string>* out) -> Status {
    if (!values.is_array() || values.empty())
      return InvalidArgument("schema " + path + ": \"enum\" must be a non-empty list");
    for (const json& v : values) {
      if (!v.is_string()) return InvalidArgument("schema " + path + ": enum values must be strings");
      out->push_back(json(v.get<std::string>()).dump());
    }
    return Status::Ok();
  };
  if (type == "object") {
    literal("{");
    const json properties = node.value("properties", json::object());
    const json required = node.value("required", json::array());
    bool first = true;
    for (const auto& [key, sub] : properties.items()) {
      if (std::find(required.begin(), required.end(), key) == required.end()) continue;
      literal((first ? "" : ",") + json(key).dump() + ":");
      first = false;
      TXSCORE_RETURN_IF_ERROR(Compile(sub, path + "." + key, program));
    }
    literal("}");
    return Status::Ok();
  }
  if (type == "string") {
    Element e;
    if (node.contains("enum")) {
      e.kind = Kind::kEnum;
      TXSCORE_RETURN_IF_ERROR(quoted_enum(node["enum"], &e.options));
    } else {
      e.kind = Kind::kString;
      e.min = node.value("minLength", 0u);
      e.max = node.value("maxLength", 256u);
      if (e.min > e.max) return InvalidArgument("schema " + path + ": minLength exceeds maxLength");
    }
    program->push_back(std::move(e));
    return Status::Ok();
  }
  if (type == "number" || type == "integer") {
    Element e;
    e.kind = Kind::kNumber;
    e.integer = type == "integer";
    program->push_back(std::move(e));
    return Status::Ok();
  }
  if (type == "boolean") {
    program->push_back({Kind::kEnum, "", {"true", "false"}, 0, 0, false});
    return Status::Ok();
  }
  if (type == "array") {
    const json items = node.value("items", json());
    if (!items.is_object() || items.value("type", "") != "string" || !items.contains("enum")) {
      return FailedPrecondition("schema " + path + ": only arrays of string enums are supported");
    }
    for (const auto& [key, value] : items.items()) {
      if (key != "enum" && kAnnotations.count(key) == 0) {
        return FailedPrecondition("schema " + path + ".items: \"" + key + "\" is not supported");
      }
    }
    Element e;
    e.kind = Kind::kEnumArray;
    TXSCORE_RETURN_IF_ERROR(quoted_enum(items["enum"], &e.options));
    e.min = node.value("minItems", 0u);
    e.max = node.value("maxItems", 8u);
    if (e.min > e.max) return InvalidArgument("schema " + path + ": minItems exceeds maxItems");
    program->push_back(std::move(e));
    return Status::Ok();
  }
  return FailedPrecondition("schema " + path + ": type \"" + type + "\" is not supported");
}

struct TrieNode {
  std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index
  std::vector<int32_t> tokens;                        // tokens whose bytes end here
};

}  // namespace

struct JsonConstraint::Impl {
  std::vector<Element> program;
  std::vector<TrieNode> trie;
  std::vector<int32_t> end_of_sequence;
  std::vector<std::string> token_bytes;

  void NextElement(JsonState* s) const {
    s->element++;
    s->offset = s->count = 0;
    s->phase = s->pending_utf8 = 0;
    s->next_low = 0x80;
    s->next_high = 0xbf;
    s->prefix.clear();
  }

  // Feeds one byte; false (state undefined) when it cannot continue a valid document.
  bool Step(JsonState* s, uint8_t b) const {
    while (true) {
      if (s->element >= program.size()) return false;
      const Element& e = program[s->element];
      switch (e.kind) {
        case Kind::kLiteral:
          if (static_cast<uint8_t>(e.literal[s->offset]) != b) return false;
          if (++s->offset == e.literal.size()) NextElement(s);
          return true;
        case Kind::kEnum: {
          s->prefix.push_back(static_cast<char>(b));
          if (!AnyStartsWith(e.options, s->prefix)) return false;
          if (std::find(e.options.begin(), e.options.end(), s->prefix) != e.options.end()) NextElement(s);
          return true;
        }
        case Kind::kString:
          if (s->phase == 0) {
            if (b != '"') return false;
            s->phase = 1;
            return true;
          }
          if (s->pending_utf8 > 0) {
            if (b < s->next_low || b > s->next_high) return false;
            s->pending_utf8--;
            s->next_low = 0x80;
            s->next_high = 0xbf;
            return true;
          }
          if (b == '"') {
            if (s->count < e.min) return false;
            NextElement(s);
            return true;
          }
          if (b < 0x20 || b == '\\' || b == 0x7f || s->count >= e.max) return false;
          if (b >= 0x80) {
            // Well-formed UTF-8 only (Unicode's table 3-7): no overlong forms, no surrogates,
            // nothing above U+10FFFF.
            if (b >= 0xc2 && b <= 0xdf) {
              s->pending_utf8 = 1;
            } else if (b >= 0xe0 && b <= 0xef) {
              s->pending_utf8 = 2;
              if (b == 0xe0) s->next_low = 0xa0;
              if (b == 0xed) s->next_high = 0x9f;
            } else if (b >= 0xf0 && b <= 0xf4) {
              s->pending_utf8 = 3;
              if (b == 0xf0) s->next_low = 0x90;
              if (b == 0xf4) s->next_high = 0x8f;
            } else {
              return false;
            }
          }
          s->count++;
          return true;
        case Kind::kNumber: {
          int next = s->offset < kMaxNumberBytes ? NumberNext(s->phase, b, e.integer) : -1;
          // At most two exponent digits, so every number fits a double.
          if (next == kExpDigits && s->phase == kExpDigits && s->count >= 2) next = -1;
          if (next >= 0) {
            s->count = next == kExpDigits ? s->count + 1 : 0;
            s->phase = static_cast<uint8_t>(next);
            s->offset++;
            return true;
          }
          if (s->offset == 0 || !NumberCanEnd(s->phase)) return false;
          NextElement(s);  // the number ended; the byte belongs to what follows
          continue;
        }
        case Kind::kEnumArray:
          switch (s->phase) {
            case 0:  // expect '['
              if (b != '[') return false;
              s->phase = 1;
              return true;
            case 1:  // after '[': ']' or an item
              if (b == ']' && e.min == 0) {
                NextElement(s);
                return true;
              }
              [[fallthrough]];
            case 4:  // after ',': an item
              s->prefix.assign(1, static_cast<char>(b));
              if (!AnyStartsWith(e.options, s->prefix)) return false;
              s->phase = 2;
              return true;
            case 2:  // inside an item
              s->prefix.push_back(static_cast<char>(b));
              if (!AnyStartsWith(e.options, s->prefix)) return false;
              if (std::find(e.options.begin(), e.options.end(), s->prefix) != e.options.end()) {
                s->count++;
                s->phase = 3;
                s->prefix.clear();
              }
              return true;
            case 3:  // after an item: ',' or ']'
              if (b == ',' && s->count < e.max) {
                s->phase = 4;
                return true;
              }
              if (b == ']' && s->count >= e.min) {
                NextElement(s);
                return true;
              }
              return false;
          }
          return false;
      }
      return false;
    }
  }

  // Bytes of the shortest text that completes an element from scratch.
  static size_t MinLength(const Element& e) {
    switch (e.kind) {
      case Kind::kLiteral:
        return e.literal.size();
      case Kind::kEnum:
        return ShortestOption(e.options, "");
      case Kind::kString:
        return 2 + e.min;
      case Kind::kNumber:
        return 1;
      case Kind::kEnumArray:
        return 2 + (e.min == 0 ? 0 : e.min * ShortestOption(e.options, "") + (e.min - 1));
    }
    return 0;
  }
  static size_t ShortestOption(const std::vector<std::string>& options, const std::string& prefix) {
    size_t best = SIZE_MAX;
    for (const std::string& o : options) {
      if (o.compare(0, prefix.size(), prefix) == 0) best = std::min(best, o.size() - prefix.size());
    }
    return best;
  }

  // Fewest bytes that complete the document from `s` (every byte is one token at worst, as
  // in byte-level and byte-fallback vocabularies).
  size_t MinBytesToComplete(const JsonState& s) const {
    if (s.element >= program.size()) return 0;
    const Element& e = program[s.element];
    size_t current = 0;
    switch (e.kind) {
      case Kind::kLiteral:
        current = e.literal.size() - s.offset;
        break;
      case Kind::kEnum:
        current = s.prefix.empty() ? MinLength(e) : ShortestOption(e.options, s.prefix);
        break;
      case Kind::kString:
        current = s.phase == 0 ? MinLength(e) : s.pending_utf8 + (s.count < e.min ? e.min - s.count : 0) + 1;
        break;
      case Kind::kNumber:
        current = s.offset > 0 && NumberCanEnd(s.phase) ? 0 : 1;
        break;
      case Kind::kEnumArray: {
        const size_t item = ShortestOption(e.options, "");
        const size_t missing = s.count < e.min ? e.min - s.count : 0;
        switch (s.phase) {
          case 0:
            current = MinLength(e);
            break;
          case 1:
            current = e.min == 0 ? 1 : e.min * item + (e.min - 1) + 1;
            break;
          case 2:
            current = ShortestOption(e.options, s.prefix) + (missing > 1 ? (missing - 1) * (item + 1) : 0) + 1;
            break;
          case 3:
            current = missing * (item + 1) + 1;
            break;
          case 4:
            current = item + (missing > 1 ? (missing - 1) * (item + 1) : 0) + 1;
            break;
        }
        break;
      }
    }
    return current + suffix_min[s.element + 1];
  }

  std::vector<size_t> suffix_min;  // suffix_min[i]: shortest completion of elements i..end

  // A trailing number is complete once it can end.
  bool Complete(const JsonState& s) const {
    if (s.element == program.size()) return true;
    return s.element + 1 == program.size() && program[s.element].kind == Kind::kNumber && s.offset > 0 &&
           NumberCanEnd(s.phase);
  }

  // Marks tokens below `node` that keep a valid prefix which can still be completed within
  // `budget` more tokens after them.
  void Walk(int32_t node, const JsonState& state, size_t budget, std::vector<bool>* mask) const {
    for (const auto& [byte, child] : trie[static_cast<size_t>(node)].children) {
      JsonState next = state;
      if (!Step(&next, byte)) continue;
      if (!trie[static_cast<size_t>(child)].tokens.empty() && MinBytesToComplete(next) <= budget) {
        for (int32_t token : trie[static_cast<size_t>(child)].tokens) {
          if (static_cast<size_t>(token) < mask->size()) (*mask)[static_cast<size_t>(token)] = true;
        }
      }
      Walk(child, next, budget, mask);
    }
  }
};

JsonConstraint::JsonConstraint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JsonConstraint::~JsonConstraint() = default;

Result<std::unique_ptr<JsonConstraint>> JsonConstraint::Create(const std::string& schema, const Tokenizer& tokenizer,
                                                               std::vector<int32_t> end_of_sequence_ids) {
  const json doc = json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("the schema is not valid JSON");
  auto impl = std::make_unique<Impl>();
  TXSCORE_RETURN_IF_ERROR(Compile(doc, "$", &impl->program));
  impl->suffix_min.assign(impl->program.size() + 1, 0);
  for (size_t i = impl->program.size(); i-- > 0;) {
    impl->suffix_min[i] = impl->suffix_min[i + 1] + Impl::MinLength(impl->program[i]);
  }
  impl->end_of_sequence = std::move(end_of_sequence_ids);
  // The vocabulary's bytes, as a trie (once per tokenizer and schema).
  impl->trie.emplace_back();
  impl->token_bytes.resize(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id) || tokenizer.TokenString(id).empty()) continue;
    if (tokenizer.TokenBytes(id).empty()) continue;
    const std::string bytes = tokenizer.TokenBytes(id);
    impl->token_bytes[static_cast<size_t>(id)] = bytes;
    int32_t node = 0;
    for (unsigned char b : bytes) {
      auto& children = impl->trie[static_cast<size_t>(node)].children;
      auto it = std::find_if(children.begin(), children.end(), [b](const auto& c) { return c.first == b; });
      if (it == children.end()) {
        const int32_t created = static_cast<int32_t>(impl->trie.size());
        impl->trie[static_cast<size_t>(node)].children.emplace_back(b, created);
        impl->trie.emplace_back();
        node = created;
      } else {
        node = it->second;
      }
    }
    if (node != 0) impl->trie[static_cast<size_t>(node)].tokens.push_back(id);
  }
  return std::unique_ptr<JsonConstraint>(new JsonConstraint(std::move(impl)));
}

void JsonConstraint::AllowedTokens(const JsonState& state, size_t vocab_size, size_t tokens_left,
                                   std::vector<bool>* mask) const {
  mask->assign(vocab_size, false);
  if (tokens_left == 0) return;
  impl_->Walk(0, state, tokens_left - 1, mask);
  if (IsComplete(state)) {
    for (int32_t id : impl_->end_of_sequence) {
      if (static_cast<size_t>(id) < vocab_size) (*mask)[static_cast<size_t>(id)] = true;
    }
  }
}

bool JsonConstraint::Advance(JsonState* state, int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= impl_->token_bytes.size()) return false;
  const std::string& bytes = impl_->token_bytes[static_cast<size_t>(token)];
  if (bytes.empty()) return false;
  JsonState next = *state;
  for (unsigned char b : bytes) {
    if (!impl_->Step(&next, b)) return false;
  }
  *state = std::move(next);
  return true;
}

bool JsonConstraint::IsComplete(const JsonState& state) const { return impl_->Complete(state); }

size_t JsonConstraint::MinTokensToComplete(const JsonState& state) const { return impl_->MinBytesToComplete(state); }

bool JsonConstraint::Accepts(const std::string& text) const {
  JsonState state = Start();
  for (unsigned char b : text) {
    if (!impl_->Step(&state, b)) return false;
  }
  return IsComplete(state);
}

}  // namespace txscore::llm
