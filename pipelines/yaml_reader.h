// Strict reading of a pipeline file's YAML: every error names the file, line and column.
//
// The pipeline parser (config.cc) and every stage kind (stage_kind.h) read their keys through
// one YamlReader, so a kind's own keys are checked exactly like the file's: unknown or repeated
// keys, values of the wrong type or out of range, and paths that do not name what they must.
// yaml-cpp's exceptions are caught in config.cc and nowhere else; the reader never throws.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "common/result.h"
#include "pipelines/source_location.h"

namespace txscore::pipelines {

class YamlReader {
 public:
  // `source`: the file's name, as errors report it; relative paths resolve against `base_dir`.
  YamlReader(std::string source, std::filesystem::path base_dir)
      : source_(std::move(source)), base_dir_(std::move(base_dir)) {}

  const std::string& source() const { return source_; }
  static SourceLocation LocationOf(const YAML::Node& node);

  Error ErrorAt(const YAML::Node& node, const std::string& message) const;
  Error ErrorAt(SourceLocation at, const std::string& message) const;
  // yaml-cpp's marks are 0-based.
  Error ErrorAtMark(int line, int column, const std::string& message) const;
  // A file `text` that yaml-cpp could not parse (`e`): its message at its mark, or, when a line
  // (not a comment) is indented with a tab, that line and column named first, with yaml-cpp's
  // own place and message after it (its message for a tab, such as "end of map not found",
  // points elsewhere and does not say why).
  Error ParseFailure(const std::string& text, const YAML::Exception& e) const;

  // The map at `node`, whose keys must all be in `allowed` and appear once.
  Status ExpectMap(const YAML::Node& node, const std::string& what, const std::set<std::string>& allowed) const;

  // Each Read* keeps `*out` (its default) when the key is absent.
  template <typename T>
  Status Read(const YAML::Node& map, const std::string& key, const char* type_name, T* out) const {
    const YAML::Node node = map[key];
    if (!node) return Status::Ok();
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, *out)) {
      return ErrorAt(node, "\"" + key + "\" must be " + type_name);
    }
    return Status::Ok();
  }
  Status ReadBool(const YAML::Node& map, const std::string& key, bool* out) const {
    return Read<bool>(map, key, "true or false", out);
  }
  // Ranges are checked on what the file says.
  Status ReadInt(const YAML::Node& map, const std::string& key, int64_t min, int64_t max, int64_t* out) const;
  Status ReadInt(const YAML::Node& map, const std::string& key, int min, int max, int* out) const;
  Status ReadDouble(const YAML::Node& map, const std::string& key, double min, double max, double* out) const;
  Status ReadString(const YAML::Node& map, const std::string& key, bool required, std::string* out) const;

  // What a path read from the file must name when the file is loaded.
  enum class PathMustBe { kAnything, kRegularFile, kDirectory };
  static constexpr uintmax_t kMaxFileBytes = uintmax_t{16} << 30;  // models, keys, lists: 16 GiB at most
  // A path relative to the YAML file's directory. A kRegularFile must exist, be a regular file
  // (not a directory, a device or /proc/self/mem) of at most kMaxFileBytes and be readable
  // from its start; a kDirectory must exist and be one.
  Status ReadPath(const YAML::Node& map, const std::string& key, bool required, PathMustBe must_be,
                  std::string* out) const;

 private:
  std::string source_;
  std::filesystem::path base_dir_;
};

}  // namespace txscore::pipelines
