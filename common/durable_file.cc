#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace txscore {

Status WriteAll(int fd, std::string_view text, const std::string& path) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal("cannot write " + path + ": " + std::strerror(errno));
    written += static_cast<size_t>(n);
  }
  return Status::Ok();
}

namespace {

Status WriteDurably(const std::string& path, std::string_view text, mode_t mode, int create_flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | create_flags, mode);
  if (fd < 0) return Internal("cannot write " + path + ": " + std::strerror(errno));
  // A file this call created gets `mode` itself; the umask only narrows what open() gave it.
  if ((create_flags & O_EXCL) != 0 && ::fchmod(fd, mode) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Internal("cannot set the mode of " + path + ": " + why);
  }
  Status written = WriteAll(fd, text, path);
  const bool synced = written.ok() && ::fsync(fd) == 0;
  const std::string why = synced ? "" : std::strerror(errno);
  const bool closed = ::close(fd) == 0;
  if (!written.ok()) return written;
  if (!synced || !closed) return Internal("cannot sync " + path + ": " + why);
  return Status::Ok();
}

}  // namespace

Status WriteFileDurably(const std::string& path, std::string_view text, mode_t mode) {
  return WriteDurably(path, text, mode, O_CREAT | O_TRUNC);
}

Status WriteNewFileDurably(const std::string& path, std::string_view text, mode_t mode) {
  return WriteDurably(path, text, mode, O_CREAT | O_EXCL | O_NOFOLLOW);
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Internal("cannot open directory " + dir + ": " + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const std::string why = synced ? "" : std::strerror(errno);
  ::close(fd);
  if (!synced) return Internal("cannot sync directory " + dir + ": " + why);
  return Status::Ok();
}

AppendOnlyFile::~AppendOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status AppendOnlyFile::Open(const std::string& path, int64_t keep) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return Internal("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Internal("cannot stat " + path + ": " + std::strerror(errno));
  if (st.st_size < keep) {
    return DataLoss(path + " is shorter (" + std::to_string(st.st_size) + " bytes) than the " + std::to_string(keep) +
                    " bytes recorded as written");
  }
  if (::ftruncate(fd_, keep) != 0) return Internal("cannot truncate " + path + ": " + std::strerror(errno));
  length_ = keep;
  return Status::Ok();
}

Status AppendOnlyFile::AppendDurably(std::string_view text) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n =
        ::pwrite(fd_, text.data() + written, text.size() - written, length_ + static_cast<off_t>(written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal("cannot write " + path_ + ": " + std::strerror(errno));
    written += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) return Internal("cannot sync " + path_ + ": " + std::strerror(errno));
  length_ += static_cast<int64_t>(written);
  return Status::Ok();
}

}  // namespace txscore
