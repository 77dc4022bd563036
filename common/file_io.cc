#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace txscore {

std::string FileVersionStamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  const auto nanoseconds = [](const struct timespec& t) {
    return std::to_string(static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec);
  };
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         nanoseconds(st.st_mtim) + ":" + nanoseconds(st.st_ctim);
}

bool SameFileVersion(const struct stat& a, const struct stat& b) {
  return a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

namespace {

// `after_read`: when set, the file must be unchanged after the read (ReadUnchangedFileBounded).
Result<std::string> ReadBounded(const std::string& path, size_t max_bytes, const std::string& what, int open_flags,
                                const OpenFileCheck& check, const std::function<void()>* after_read = nullptr) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | open_flags);
  if (fd < 0) {
    if (errno == ELOOP && (open_flags & O_NOFOLLOW) != 0) {
      return InvalidArgument(what + " " + path + " is a symbolic link; name the file itself");
    }
    const std::string why = errno == ENOENT ? "" : std::string(": ") + std::strerror(errno);
    return NotFound(what + " " + path + " does not exist or cannot be read" + why);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(what + " " + path + " is not a regular file");
  }
  if (check) {
    Status checked = check(st);
    if (!checked.ok()) {
      ::close(fd);
      return checked.error();
    }
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return ResourceExhausted(what + " " + path + " is " + std::to_string(st.st_size) + " bytes; the limit is " +
                             std::to_string(max_bytes));
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return DataLoss("cannot read " + what + " " + path + ": " + why);
    }
    if (n == 0) break;
    // A file may grow while read, or report a size of 0 (as /proc files do): bound what is read.
    if (bytes.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return ResourceExhausted(what + " " + path + " holds more than " + std::to_string(max_bytes) + " bytes");
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  if (after_read != nullptr) {
    if (*after_read) (*after_read)();
    struct stat now {};
    if (::fstat(fd, &now) != 0 || !SameFileVersion(st, now) || bytes.size() != static_cast<size_t>(now.st_size)) {
      ::close(fd);
      return Unavailable(what + " " + path +
                         " changed while it was read (rewritten in place?); nothing read from it is used. Update it "
                         "by writing a new file and renaming it over this one");
    }
  }
  ::close(fd);
  return bytes;
}

}  // namespace

Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes, const std::string& what) {
  return ReadBounded(path, max_bytes, what, 0, nullptr);
}

Result<std::string> ReadUnchangedFileBounded(const std::string& path, size_t max_bytes, const std::string& what,
                                             const std::function<void()>& after_read) {
  return ReadBounded(path, max_bytes, what, 0, nullptr, &after_read);
}

Result<std::string> ReadCheckedFileBounded(const std::string& path, size_t max_bytes, const std::string& what,
                                           const OpenFileCheck& check) {
  return ReadBounded(path, max_bytes, what, O_NOFOLLOW, check);
}

bool IsKubernetesSecretOfOurGroup(const struct stat& file) {
  if (file.st_uid != 0 || ::geteuid() == 0 || (file.st_mode & 0777) != 0440) return false;
  if (file.st_gid == ::getegid()) return true;
  gid_t groups[256];
  const int count = ::getgroups(256, groups);
  for (int i = 0; i < count; ++i) {
    if (groups[i] == file.st_gid) return true;
  }
  return false;
}

}  // namespace txscore
