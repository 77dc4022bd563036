// Reading whole files that come from outside (models, keys, tokenizers, configs) without
// exceptions and without trusting them: only regular files, at most a stated size, every read
// error reported (a file such as /proc/self/mem fails to read instead of throwing).
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <functional>
#include <string>

#include "common/result.h"

namespace txscore {

// The bytes of the regular file at `path`. kNotFound when it does not exist or cannot be
// opened; kInvalidArgument when it is not a regular file; kResourceExhausted when it holds
// more than `max_bytes`; kDataLoss when reading fails part-way. `what` names the file in messages ("model file").
Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes, const std::string& what = "file");

// The same, refusing a symbolic link at `path` (kInvalidArgument) and first passing the open
// file's own fstat to `check`: what is checked is what is read, whatever replaces the name in
// between. `check`'s error is returned as it is.
using OpenFileCheck = std::function<Status(const struct stat& file)>;
Result<std::string> ReadCheckedFileBounded(const std::string& path, size_t max_bytes, const std::string& what,
                                           const OpenFileCheck& check);

// The same, refused (kUnavailable) when the file changed while it was read: its size,
// modification or change time differ after the read from before it, or the bytes read are not
// its size. Best effort: the times are as fine as the kernel's clock tick, so a rewrite of the
// same size that starts and ends within one tick of the read is not seen. A file rewritten in place
// while it is read gives a mix of old and new bytes that may still parse (a model that never
// existed on disk); the way to update such a file is to write a new one and rename it over.
// `after_read` (tests): called once the bytes are read, before the file is looked at again.
Result<std::string> ReadUnchangedFileBounded(const std::string& path, size_t max_bytes, const std::string& what,
                                             const std::function<void()>& after_read = {});

// Whether two fstat results of one open file describe the same content, as far as stat can
// tell: the same size, modification and change times (the limits above apply).
bool SameFileVersion(const struct stat& before, const struct stat& after);

// Which file is at `path` and which version of it, as one line ("device:inode:size:mtime:ctime",
// times in nanoseconds), to tell later without reading it whether it is still the same file
// unchanged (the limits above apply; a write changes the change time, which no caller can set
// back). "" when it cannot be looked at.
std::string FileVersionStamp(const std::string& path);

// True when a secret file's group may read it only because it is a Kubernetes Secret mounted
// with an fsGroup: owned by root, mode 0440 (group read, nothing for others, no write), its
// group one of this process's groups, and this process not root (a root process shares group
// 0 with whatever else runs as root). Kubelet gives such files 0440 whatever the volume's
// defaultMode says, and without the group bit a non-root process could not read them at all.
bool IsKubernetesSecretOfOurGroup(const struct stat& file);

}  // namespace txscore
