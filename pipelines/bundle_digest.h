// A pipeline's bundle digest: one SHA-256 over everything that decides what the pipeline does,
// the pipeline file and every file its stages read (models, feature schemas, rule lists, LLM
// checkpoints: StageKind::Files). The service settings may pin it (`pipeline_digest:`), so that
// whoever can write those files but not the settings cannot change a decision; each audit record
// names the digest of the bundle that decided.
//
// The digest is over a manifest, one line per file, in the pipeline's stage order:
//
//   txscore pipeline bundle v1
//   pipeline <sha256 hex> <bytes>
//   fraud model <sha256 hex> <bytes>
//   fraud schema <sha256 hex> <bytes>
//   rules list deny_merchants <sha256 hex> <bytes>
//   forensic model/config.json <sha256 hex> <bytes>     (a directory: each regular file, sorted)
//
// Lines name a file by its stage and role, not its path, so the same bundle copied elsewhere
// has the same digest, and a file renamed within a checkpoint changes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "pipelines/config.h"

namespace txscore::pipelines {

struct BundleFile {
  std::string name;  // "pipeline", "fraud model", "forensic model/config.json"
  std::string path;  // where it was read, for messages
  std::string sha256_hex;
  uint64_t bytes = 0;
};

struct BundleDigest {
  std::vector<BundleFile> files;
  std::string digest;  // "sha256:" and 64 hex digits: SHA-256 of Manifest()
  std::string Manifest() const;
};

// Hashes the pipeline file's text as parsed (config.source_text) and reads and hashes every file
// its stages name. kNotFound when one cannot be read; kInvalidArgument
// when a checkpoint directory holds something other than regular files and directories.
Result<BundleDigest> DigestPipelineBundle(const PipelineConfig& config);

// The pinned digest's form: "sha256:" and 64 lowercase hex digits.
bool IsBundleDigest(const std::string& text);

// kFailedPrecondition when `pinned` is set and `actual` is another: the message names both and
// what to run to see which file differs. `settings_path` and `key` name where the pin is; a pin
// other than `pipeline_digest` (the claims pipeline's) names `pipeline_path` in that command.
Status CheckPinnedDigest(const std::string& pinned, const BundleDigest& actual, const std::string& settings_path,
                         const std::string& key = "pipeline_digest", const std::string& pipeline_path = "");

}  // namespace txscore::pipelines
