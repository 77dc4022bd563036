#include "pipelines/yaml_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

namespace txscore::pipelines {
namespace {

namespace fs = std::filesystem;

std::string Format(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

SourceLocation YamlReader::LocationOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return {mark.line + 1, mark.column + 1};
}

Error YamlReader::ErrorAt(const YAML::Node& node, const std::string& message) const {
  const YAML::Mark mark = node.Mark();
  return ErrorAtMark(mark.line, mark.column, message);
}

Error YamlReader::ErrorAt(SourceLocation at, const std::string& message) const {
  return ErrorAtMark(at.line - 1, at.column - 1, message);
}

Error YamlReader::ErrorAtMark(int line, int column, const std::string& message) const {
  return InvalidArgument(source_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message);
}

Error YamlReader::ParseFailure(const std::string& text, const YAML::Exception& e) const {
  size_t line_start = 0;
  for (int line = 0; line_start < text.size(); ++line) {
    size_t indent_end = line_start;
    while (indent_end < text.size() && (text[indent_end] == ' ' || text[indent_end] == '\t')) ++indent_end;
    const size_t tab = text.find('\t', line_start);
    const bool comment = indent_end < text.size() && text[indent_end] == '#';
    if (tab < indent_end && !comment) {
      // Named with yaml-cpp's own place and words: a tab inside a block scalar is legal, so
      // the tab may not be what failed.
      return ErrorAtMark(line, static_cast<int>(tab - line_start),
                         "a tab in the indentation (YAML indents with spaces only; yaml-cpp said at " +
                             std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) + ": " + e.msg +
                             ")");
    }
    const size_t end = text.find('\n', line_start);
    if (end == std::string::npos) break;
    line_start = end + 1;
  }
  return ErrorAtMark(e.mark.line, e.mark.column, e.msg);
}

Status YamlReader::ExpectMap(const YAML::Node& node, const std::string& what,
                             const std::set<std::string>& allowed) const {
  if (!node.IsMap()) return ErrorAt(node, what + " must be a mapping");
  std::map<std::string, int> first_line;  // yaml-cpp keeps duplicates and reads the first: refuse them
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const auto [seen, inserted] = first_line.emplace(key, entry.first.Mark().line + 1);
    if (!inserted) {
      return ErrorAt(entry.first, "\"" + key + "\" is given twice in " + what + " (first on line " +
                                      std::to_string(seen->second) + ")");
    }
    if (allowed.count(key) == 0) {
      std::string expected;
      for (const auto& k : allowed) expected += (expected.empty() ? "" : ", ") + k;
      return ErrorAt(entry.first, "unknown key \"" + key + "\" in " + what + " (expected one of: " + expected + ")");
    }
  }
  return Status::Ok();
}

Status YamlReader::ReadInt(const YAML::Node& map, const std::string& key, int64_t min, int64_t max,
                           int64_t* out) const {
  if (!map[key]) return Status::Ok();
  TXSCORE_RETURN_IF_ERROR(Read<int64_t>(map, key, "an integer", out));
  if (*out < min || *out > max) {
    return ErrorAt(map[key], "\"" + key + "\" must be between " + std::to_string(min) + " and " + std::to_string(max));
  }
  return Status::Ok();
}

Status YamlReader::ReadInt(const YAML::Node& map, const std::string& key, int min, int max, int* out) const {
  int64_t wide = *out;
  TXSCORE_RETURN_IF_ERROR(ReadInt(map, key, static_cast<int64_t>(min), static_cast<int64_t>(max), &wide));
  *out = static_cast<int>(wide);
  return Status::Ok();
}

Status YamlReader::ReadDouble(const YAML::Node& map, const std::string& key, double min, double max,
                              double* out) const {
  if (!map[key]) return Status::Ok();
  TXSCORE_RETURN_IF_ERROR(Read<double>(map, key, "a number", out));
  if (!(*out >= min && *out <= max)) {
    return ErrorAt(map[key], "\"" + key + "\" must be between " + Format(min) + " and " + Format(max));
  }
  return Status::Ok();
}

Status YamlReader::ReadString(const YAML::Node& map, const std::string& key, bool required, std::string* out) const {
  const YAML::Node node = map[key];
  if (!node) {
    if (required) return ErrorAt(map, "missing required key \"" + key + "\"");
    return Status::Ok();
  }
  if (!node.IsScalar() || node.Scalar().empty()) return ErrorAt(node, "\"" + key + "\" must be a non-empty string");
  *out = node.Scalar();
  return Status::Ok();
}

Status YamlReader::ReadPath(const YAML::Node& map, const std::string& key, bool required, PathMustBe must_be,
                            std::string* out) const {
  std::string raw;
  TXSCORE_RETURN_IF_ERROR(ReadString(map, key, required, &raw));
  if (raw.empty()) return Status::Ok();
  fs::path p(raw);
  if (p.is_relative()) p = base_dir_ / p;
  *out = p.lexically_normal().string();
  if (must_be == PathMustBe::kAnything) return Status::Ok();
  std::error_code ec;
  const fs::file_status status = fs::status(*out, ec);  // follows symbolic links
  if (ec || !fs::exists(status)) return ErrorAt(map[key], "\"" + key + "\": file " + *out + " does not exist");
  if (must_be == PathMustBe::kDirectory) {
    if (!fs::is_directory(status)) return ErrorAt(map[key], "\"" + key + "\": " + *out + " is not a directory");
    return Status::Ok();
  }
  if (!fs::is_regular_file(status)) {
    return ErrorAt(map[key], "\"" + key + "\": " + *out + " is not a regular file" +
                                 (fs::is_directory(status) ? " (it is a directory)" : ""));
  }
  const uintmax_t size = fs::file_size(*out, ec);
  if (ec || size > kMaxFileBytes) return ErrorAt(map[key], "\"" + key + "\": " + *out + " is larger than 16 GiB");
  // Readable from the start: files that look regular and are not, such as /proc/self/mem,
  // are refused here with the line. Permissions are left to the command that opens the
  // file (`txscore plan` or `audit` may run under an account that cannot read the card key).
  const int fd = ::open(out->c_str(), O_RDONLY | O_CLOEXEC);
  char first[1] = {0};
  const ssize_t read = fd < 0 ? 0 : ::read(fd, first, sizeof first);
  const int read_errno = errno;
  explicit_bzero(first, sizeof first);  // a key's first byte, maybe
  if (fd >= 0) ::close(fd);
  if (read < 0) return ErrorAt(map[key], "\"" + key + "\": " + *out + " cannot be read: " + std::strerror(read_errno));
  return Status::Ok();
}

}  // namespace txscore::pipelines
