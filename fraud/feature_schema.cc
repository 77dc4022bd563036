#include "fraud/feature_schema.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/file_io.h"

namespace txscore::fraud {
namespace {
constexpr char kFormat[] = "txscore.feature_schema/1";
}

FeatureSchema FeatureSchema::AllFeatures() {
  FeatureSchema schema;
  for (int i = 0; i < kFeatureCount; ++i) schema.features_.push_back(static_cast<FeatureId>(i));
  return schema;
}

FeatureSchema FeatureSchema::TransactionFeatures() {
  FeatureSchema schema;
  for (int i = 0; i < static_cast<int>(kFirstClaimFeature); ++i) schema.features_.push_back(static_cast<FeatureId>(i));
  return schema;
}

FeatureSchema FeatureSchema::ClaimFeatures() {
  FeatureSchema schema;
  for (int i = static_cast<int>(kFirstClaimFeature); i < kFeatureCount; ++i) {
    schema.features_.push_back(static_cast<FeatureId>(i));
  }
  return schema;
}

Result<FeatureSchema> FeatureSchema::Load(const std::string& path) {
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "feature schema");
  if (!text.ok()) return text.error();
  return Parse(*text, path);
}

namespace {

// Whether a schema may declare a feature of type `actual` as `declared`. Every value reaches
// XGBoost as a float, so int and bool features may be declared "float" (as a data scientist's
// export often does), and bool ones "int"; categories are codes and must say so.
bool TypeFits(const nlohmann::json& declared, std::string_view actual) {
  if (!declared.is_string()) return false;
  const std::string d = declared.get<std::string>();
  if (d == actual) return true;
  if (actual == "int" || actual == "bool") return d == "float" || (actual == "bool" && d == "int");
  return false;
}

}  // namespace

Result<FeatureSchema> FeatureSchema::Parse(const std::string& json_text, const std::string& source_name) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(source_name + ": not valid JSON");
  if (!doc.is_object() || doc.value("format", "") != kFormat) {
    return InvalidArgument(source_name + ": expected an object with \"format\": \"" + kFormat + "\"");
  }
  auto features = doc.find("features");
  if (features == doc.end() || !features->is_array() || features->empty()) {
    return InvalidArgument(source_name + ": \"features\" must be a non-empty array");
  }
  FeatureSchema schema;
  std::set<FeatureId> seen;
  for (size_t i = 0; i < features->size(); ++i) {
    const nlohmann::json& entry = (*features)[i];
    const std::string where = source_name + ": features[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) {
      return InvalidArgument(where + " needs a string \"name\"");
    }
    const std::string name = entry["name"].get<std::string>();
    std::optional<FeatureId> id = FeatureIdFromName(name);
    if (!id) return InvalidArgument(where + ": unknown feature \"" + name + "\"");
    if (entry.contains("type") && !TypeFits(entry["type"], FeatureType(*id))) {
      const std::string actual(FeatureType(*id));
      return InvalidArgument(where + ": feature \"" + name + "\" has type " + actual + "; write \"type\": \"" + actual +
                             "\"" + (actual == "int" || actual == "bool" ? " or \"float\"" : "") +
                             ", or leave \"type\" out");
    }
    if (!seen.insert(*id).second) return InvalidArgument(where + ": feature \"" + name + "\" listed twice");
    schema.features_.push_back(*id);
  }
  return schema;
}

std::string FeatureSchema::ToJson() const {
  nlohmann::json doc;
  doc["format"] = kFormat;
  doc["features"] = nlohmann::json::array();
  for (FeatureId id : features_) {
    doc["features"].push_back({{"name", FeatureName(id)}, {"type", FeatureType(id)}});
  }
  return doc.dump(2) + "\n";
}

Status FeatureSchema::Save(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  out << ToJson();
  out.close();
  if (!out) return Internal("cannot write feature schema " + path);
  return Status::Ok();
}

void FeatureSchema::Select(const FeatureVector& all, float* out) const {
  for (size_t i = 0; i < features_.size(); ++i) out[i] = all[static_cast<int>(features_[i])];
}

std::string SchemaPathForModel(const std::string& model_path) {
  std::filesystem::path p(model_path);
  return (p.parent_path() / (p.stem().string() + ".features.json")).string();
}

}  // namespace txscore::fraud
