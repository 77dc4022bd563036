// Typed reads of one object of a Hugging Face config.json, shared by the parser
// (llm/model_config.cc) and the model families (llm/families/): a missing key leaves the target
// as it is (the family default already there), and null counts as missing, as Hugging Face
// writes null for "off". Errors name the source file and the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

class ConfigKeys {
 public:
  // `object` must outlive this reader; `source` prefixes every error ("m/config.json: text_config").
  ConfigKeys(const nlohmann::json& object, std::string source);

  // required: a missing key is an error unless *out already holds a (family default) value.
  Status Int(const char* key, int64_t* out, bool required = false) const;
  Status Double(const char* key, double* out) const;
  Status OptionalDouble(const char* key, std::optional<double>* out) const;
  Status Bool(const char* key, bool* out) const;
  Status String(const char* key, std::string* out) const;
  // An id or a list of ids (eos_token_id is either).
  Status Ids(const char* key, std::vector<int64_t>* out) const;

  // The value of `key`; null when it is absent or null.
  const nlohmann::json* Find(const char* key) const;
  // Whether `key` is written with the value null (Gemma's "soft-capping off").
  bool IsNull(const char* key) const;

  Error Missing(const char* key) const;
  Error Wrong(const char* key, const char* expected) const;
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& object_;
  std::string source_;
};

}  // namespace txscore::llm
