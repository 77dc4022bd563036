#include "pipelines/bundle_digest.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/sha256.h"

namespace txscore::pipelines {
namespace {

constexpr char kManifestHeader[] = "txscore pipeline bundle v1\n";
constexpr char kDigestPrefix[] = "sha256:";

Status AddFile(const std::string& name, const std::string& path, std::vector<BundleFile>* files) {
  std::error_code error;
  const uintmax_t bytes = std::filesystem::file_size(path, error);
  if (error) return NotFound("pipeline bundle: cannot read " + path + " (" + name + "): " + error.message());
  TXSCORE_ASSIGN_OR_RETURN(std::string sha256_hex, Sha256HexOfFile(path));
  files->push_back({name, path, std::move(sha256_hex), static_cast<uint64_t>(bytes)});
  return Status::Ok();
}

// Every regular file under `dir`, by its path relative to it, in byte order of those paths.
Status AddDirectory(const std::string& name, const std::string& dir, std::vector<BundleFile>* files) {
  std::vector<std::string> relative;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    const std::filesystem::file_status status = it->status(error);  // a link counts as what it names
    if (error) break;
    if (std::filesystem::is_directory(status)) continue;
    if (!std::filesystem::is_regular_file(status)) {
      return InvalidArgument("pipeline bundle: " + it->path().string() + " (in " + name +
                             ") is neither a regular file nor a directory");
    }
    std::string name_in_dir = std::filesystem::relative(it->path(), dir).generic_string();
    // A name with a line break could forge a line of the manifest.
    if (std::any_of(name_in_dir.begin(), name_in_dir.end(), [](char c) { return c >= 0 && c < 0x20; })) {
      return InvalidArgument("pipeline bundle: a file in " + dir + " (" + name +
                             ") has a control character in its name");
    }
    relative.push_back(std::move(name_in_dir));
  }
  if (error) return NotFound("pipeline bundle: cannot list " + dir + " (" + name + "): " + error.message());
  std::sort(relative.begin(), relative.end());
  for (const std::string& file : relative) {
    TXSCORE_RETURN_IF_ERROR(AddFile(name + "/" + file, (std::filesystem::path(dir) / file).string(), files));
  }
  return Status::Ok();
}

}  // namespace

std::string BundleDigest::Manifest() const {
  std::string manifest = kManifestHeader;
  for (const BundleFile& file : files) {
    manifest += file.name + " " + file.sha256_hex + " " + std::to_string(file.bytes) + "\n";
  }
  return manifest;
}

Result<BundleDigest> DigestPipelineBundle(const PipelineConfig& config) {
  BundleDigest bundle;
  // The pipeline file as it was parsed, not as it is now.
  TXSCORE_ASSIGN_OR_RETURN(std::string pipeline_sha256, Sha256Hex(config.source_text));
  bundle.files.push_back({"pipeline", config.source_path, std::move(pipeline_sha256), config.source_text.size()});
  for (size_t i = 0; i < config.stages.size(); ++i) {
    for (const StageFile& file : config.kinds[i]->Files(*config.settings[i])) {
      const std::string name = config.stages[i].name + " " + file.role;
      std::error_code error;
      if (std::filesystem::is_directory(file.path, error)) {
        TXSCORE_RETURN_IF_ERROR(AddDirectory(name, file.path, &bundle.files));
      } else {
        TXSCORE_RETURN_IF_ERROR(AddFile(name, file.path, &bundle.files));
      }
    }
  }
  TXSCORE_ASSIGN_OR_RETURN(std::string digest, Sha256Hex(bundle.Manifest()));
  bundle.digest = kDigestPrefix + digest;
  return bundle;
}

bool IsBundleDigest(const std::string& text) {
  const std::string prefix = kDigestPrefix;
  return text.size() == prefix.size() + 64 && text.compare(0, prefix.size(), prefix) == 0 &&
         text.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos;
}

Status CheckPinnedDigest(const std::string& pinned, const BundleDigest& actual, const std::string& settings_path,
                         const std::string& key, const std::string& pipeline_path) {
  if (pinned.empty() || pinned == actual.digest) return Status::Ok();
  const std::string see = key == "pipeline_digest" ? "--config " + settings_path : "--pipeline " + pipeline_path;
  return FailedPrecondition("the pipeline's files have digest " + actual.digest + ", not the " + pinned + " that " +
                            key + " in " + settings_path +
                            " pins: a file of the pipeline changed; see each file's digest with: txscore pipeline "
                            "digest " +
                            see);
}

}  // namespace txscore::pipelines
