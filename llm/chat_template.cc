#include "llm/chat_template.h"

#include <algorithm>

#include "llm/tokenizer.h"
#include "llm/utf8.h"

namespace txscore::llm {
namespace {

using jinja::Json;

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object.
std::optional<std::string> TokenText(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromConfig(const Json& config, const std::string& source) {
  const auto found = config.find("chat_template");
  if (found == config.end() || found->is_null()) return std::shared_ptr<const ChatTemplate>();
  std::string text;
  if (found->is_string()) {
    text = found->get<std::string>();
  } else if (found->is_array()) {
    for (const Json& named : *found) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        text = named["template"].get<std::string>();
      }
    }
    if (text.empty())
      return InvalidArgument(source + ": chat_template lists no template named \"default\"", "chat_template");
  } else {
    return InvalidArgument(source + ": chat_template must be a string or a list of named templates", "chat_template");
  }
  Result<jinja::Template> compiled = jinja::Template::Parse(text, source + " chat_template");
  if (!compiled.ok()) return compiled.error();

  // transformers' special_tokens_map: the ones the file sets.
  Json special = Json::object();
  for (const char* name :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (auto value = config.find(name); value != config.end()) {
      if (std::optional<std::string> token = TokenText(*value)) special[name] = *token;
    }
  }
  if (auto extra = config.find("additional_special_tokens"); extra != config.end() && extra->is_array()) {
    Json list = Json::array();
    for (const Json& token : *extra) {
      if (std::optional<std::string> t = TokenText(token)) list.push_back(*t);
    }
    special["additional_special_tokens"] = std::move(list);
  }
  return std::shared_ptr<const ChatTemplate>(new ChatTemplate(std::move(*compiled), std::move(special)));
}

Result<std::string> ChatTemplate::Render(const Json& messages, const ChatTemplateOptions& options) const {
  if (!messages.is_array()) return InvalidArgument("messages must be a list", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return InvalidArgument("messages[" + std::to_string(i) + "] must be an object with a string role", "messages");
    }
  }
  Json variables = special_tokens_;
  variables["messages"] = messages;
  variables["tools"] = options.tools;
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = options.add_generation_prompt;
  if (options.extra.is_object()) {
    for (const auto& [key, value] : options.extra.items()) variables[key] = value;
  }
  return compiled_.Render(variables);
}

Result<std::vector<int32_t>> ApplyChatTemplate(const Tokenizer& tokenizer, const Json& messages,
                                               const ChatTemplateOptions& options) {
  const ChatTemplate* chat_template = tokenizer.chat_template();
  if (chat_template == nullptr) return FailedPrecondition("the tokenizer has no chat template");
  Result<std::string> text = chat_template->Render(messages, options);
  if (!text.ok()) return text.error();
  return tokenizer.Encode(*text);  // parse_special on, add_special_tokens off
}

std::string DefuseSpecialTokens(const Tokenizer& tokenizer, std::string_view text) {
  static const std::string kZeroWidthSpace = "\u200b";
  const std::vector<std::string>& specials = tokenizer.SpecialTokenTexts();  // longest first
  std::string out;
  size_t pos = 0, copied = 0;
  while (pos < text.size()) {
    const std::string* hit = nullptr;
    for (const std::string& special : specials) {
      if (text.compare(pos, special.size(), special) == 0) {
        hit = &special;
        break;
      }
    }
    const size_t first = std::min(Utf8SequenceLength(static_cast<unsigned char>(text[pos])), text.size() - pos);
    // A token of one character cannot be broken; the tokenizer's vocabularies have none.
    if (hit == nullptr || hit->size() == first) {
      ++pos;
      continue;
    }
    out.append(text, copied, pos + first - copied);
    out += kZeroWidthSpace;
    copied = pos + first;  // the rest of the token is copied as text
    pos += hit->size();
  }
  out.append(text, copied, std::string::npos);
  return out;
}

std::string DefuseChatMarkup(std::string_view text) {
  static const std::string kZeroWidthSpace = "\u200b";
  static const char* kMarkers[] = {"<|",  "|>",   "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>",
                                   "<s>", "</s>", "[INST]",          "[/INST]"};
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    bool broken = false;
    for (const char* marker : kMarkers) {
      if (text.substr(pos).rfind(marker, 0) == 0) {
        const std::string_view m(marker);
        out += m.substr(0, 1);
        out += kZeroWidthSpace;
        out += m.substr(1);
        pos += m.size();
        broken = true;
        break;
      }
    }
    if (!broken) out += text[pos++];
  }
  return out;
}

}  // namespace txscore::llm
