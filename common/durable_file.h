// Files written so that a crash leaves either the old bytes or the new ones: the one place
// for write-all-then-fsync, directory syncs, and append-then-fdatasync files (a claims job's
// output, inline job inputs, a model's private copy).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace txscore {

// Writes `text` to the open descriptor `fd` whole (retrying short writes and EINTR).
// kInternal naming `path` on failure.
Status WriteAll(int fd, std::string_view text, const std::string& path);

// Creates (or truncates) `path` with `mode`, writes `text` and fsyncs it.
Status WriteFileDurably(const std::string& path, std::string_view text, mode_t mode = 0600);
// The same for a file that must not exist yet (O_EXCL | O_NOFOLLOW): an error rather than
// writing through a file or symbolic link someone else put at `path` (secrets: a keyset). The
// new file gets exactly `mode` (fchmod on the open file), whatever the umask: 0644 stays 0644
// under txscore's umask of 077.
Status WriteNewFileDurably(const std::string& path, std::string_view text, mode_t mode = 0600);

// Makes a new or renamed entry of `dir` durable (fsync of the directory).
Status SyncDirectory(const std::string& dir);

// A file appended to in steps, each durable (fdatasync) before Append returns.
class AppendOnlyFile {
 public:
  AppendOnlyFile() = default;
  AppendOnlyFile(const AppendOnlyFile&) = delete;
  AppendOnlyFile& operator=(const AppendOnlyFile&) = delete;
  ~AppendOnlyFile();

  // Opens (creating, mode 0600) `path` and cuts it back to its first `keep` bytes: what an
  // earlier run recorded as durable. kDataLoss when the file is shorter than that.
  Status Open(const std::string& path, int64_t keep);
  Status AppendDurably(std::string_view text);
  int64_t length() const { return length_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t length_ = 0;
};

}  // namespace txscore
