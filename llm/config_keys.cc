#include "llm/config_keys.h"

namespace txscore::llm {

using nlohmann::json;

ConfigKeys::ConfigKeys(const json& object, std::string source) : object_(object), source_(std::move(source)) {}

Status ConfigKeys::Int(const char* key, int64_t* out, bool required) const {
  const json* v = Find(key);
  if (v == nullptr) return required && *out == 0 ? Missing(key) : Status::Ok();
  if (!v->is_number_integer() || v->get<int64_t>() < 0) return Wrong(key, "a non-negative integer");
  *out = v->get<int64_t>();
  return Status::Ok();
}

Status ConfigKeys::Double(const char* key, double* out) const {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Wrong(key, "a number");
  *out = v->get<double>();
  return Status::Ok();
}

Status ConfigKeys::OptionalDouble(const char* key, std::optional<double>* out) const {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Wrong(key, "a number");
  *out = v->get<double>();
  return Status::Ok();
}

Status ConfigKeys::Bool(const char* key, bool* out) const {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return Wrong(key, "true or false");
  *out = v->get<bool>();
  return Status::Ok();
}

Status ConfigKeys::String(const char* key, std::string* out) const {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return Wrong(key, "a string");
  *out = v->get<std::string>();
  return Status::Ok();
}

Status ConfigKeys::Ids(const char* key, std::vector<int64_t>* out) const {
  const json* v = Find(key);
  if (v == nullptr) return Status::Ok();
  out->clear();
  if (v->is_number_integer()) {
    out->push_back(v->get<int64_t>());
    return Status::Ok();
  }
  if (!v->is_array()) return Wrong(key, "an integer or a list of integers");
  for (const json& id : *v) {
    if (!id.is_number_integer()) return Wrong(key, "an integer or a list of integers");
    out->push_back(id.get<int64_t>());
  }
  return Status::Ok();
}

const json* ConfigKeys::Find(const char* key) const {
  auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

bool ConfigKeys::IsNull(const char* key) const {
  auto it = object_.find(key);
  return it != object_.end() && it->is_null();
}

Error ConfigKeys::Missing(const char* key) const { return InvalidArgument(source_ + ": missing \"" + key + "\"", key); }

Error ConfigKeys::Wrong(const char* key, const char* expected) const {
  return InvalidArgument(source_ + ": \"" + key + "\" must be " + expected, key);
}

}  // namespace txscore::llm
