// The checkpoint's chat template: tokenizer_config.json's `chat_template` (a Jinja template,
// llm/jinja.h), rendered as Hugging Face's apply_chat_template renders it and encoded as it
// encodes the result (special tokens in the text are read as special tokens, none are added
// around it: the template writes its own BOS).
//
// The template sees `messages`, `add_generation_prompt`, `tools` and `documents` (None unless
// given), the
// tokenizer's special tokens as strings (bos_token, eos_token, unk_token, pad_token, ...,
// additional_special_tokens) and any extra variables (Qwen3's enable_thinking).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "llm/jinja.h"

namespace txscore::llm {

class Tokenizer;

struct ChatTemplateOptions {
  // Default: true. End with the opening of an assistant turn, for the model to write it.
  bool add_generation_prompt = true;
  // Default: null, no tools (the template sees None, as transformers passes it). An array of
  // OpenAI-style tool descriptions.
  jinja::Json tools;
  // Default: none. More variables for the template, e.g. {"enable_thinking": false}.
  jinja::Json extra = jinja::Json::object();
};

class ChatTemplate {
 public:
  // The template of a parsed tokenizer_config.json: `chat_template` as a string, or as a list
  // of {name, template} (the one named "default"). nullptr when there is none. Refused, with
  // the construct and line named, when the template uses what llm/jinja.h does not support.
  static Result<std::shared_ptr<const ChatTemplate>> FromConfig(const jinja::Json& tokenizer_config,
                                                                const std::string& source);

  // `messages`: an array of objects with at least role and content. kInvalidArgument when it
  // is not, or when the template refuses the conversation (raise_exception) or fails on it.
  Result<std::string> Render(const jinja::Json& messages, const ChatTemplateOptions& options = {}) const;

  // The special tokens the template sees, by name (bos_token -> "<bos>").
  const jinja::Json& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate(jinja::Template compiled, jinja::Json special_tokens)
      : compiled_(std::move(compiled)), special_tokens_(std::move(special_tokens)) {}
  jinja::Template compiled_;
  jinja::Json special_tokens_;
};

// Render, then encode with special tokens parsed and none added (Hugging Face's
// apply_chat_template with tokenize=True). kFailedPrecondition when the tokenizer has no chat
// template.
Result<std::vector<int32_t>> ApplyChatTemplate(const Tokenizer& tokenizer, const jinja::Json& messages,
                                               const ChatTemplateOptions& options = {});

// `text` with every special token's text in it broken by a zero-width space (U+200B) after its
// first character, so that the tokenizer reads it as plain text: for text from outside (a
// claim's narrative) that goes into a rendered prompt, where it could otherwise forge turns.
std::string DefuseSpecialTokens(const Tokenizer& tokenizer, std::string_view text);

// For text sent to a server whose tokenizer txscore cannot see (a remote pool): the chat
// markup of the supported families broken the same way: "<|" and "|>" (ChatML, Llama 3),
// <start_of_turn>, <end_of_turn>, <bos>, <eos> (Gemma), <s>, </s>, [INST], [/INST].
std::string DefuseChatMarkup(std::string_view text);

}  // namespace txscore::llm
