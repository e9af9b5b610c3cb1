#pragma once
// Whole-file reads, and whole-file writes that replace the target atomically (POSIX).
//
// write_file_atomic writes to a temporary file beside the target (path + ".tmp.<pid>.<counter>": unique within and
// across processes, and in the same directory because rename() is atomic only within one file system), flushes it
// to disk, renames it over the target and flushes the directory. A reader, or the disk after a crash, sees the old
// content or the new, never a mix; on failure the temporary is removed and the target is untouched (a crash can
// leave a temporary behind, never a half-written target). The new file has the usual permissions (0666 less the
// umask), not the old file's; a symbolic link at `path` is replaced, not followed.
//
// Errors are std::runtime_error naming the path and the system's reason: "data/x.bin: cannot open: No such file
// or directory".
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/core/error.hpp"

namespace kiln::io {

using Bytes = std::vector<uint8_t>;

namespace detail {

[[noreturn]] inline void throw_os_error(const std::filesystem::path& path, const char* what, int err) {
  throw std::runtime_error(kiln::detail::cat(path.string(), ": ", what, ": ", std::strerror(err)));
}

// Owns a file descriptor; close() reports the error that a plain destructor would have to drop.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

inline void fsync_directory_of(const std::filesystem::path& path) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) throw_os_error(path, "cannot sync its directory", errno);
}

}  // namespace detail

inline Bytes read_file(const std::filesystem::path& path) {
  detail::FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) detail::throw_os_error(path, "cannot open", errno);
  // The size is only a first guess: reading until end of file also serves files that change size, pipes and
  // /proc files.
  struct stat st {};
  const size_t guess = ::fstat(fd.get(), &st) == 0 && st.st_size > 0 ? size_t(st.st_size) : 0;
  Bytes bytes(guess + 1);
  size_t used = 0;
  for (;;) {
    if (used == bytes.size()) bytes.resize(bytes.size() * 2);
    const ssize_t n = ::read(fd.get(), bytes.data() + used, bytes.size() - used);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      detail::throw_os_error(path, "cannot read", errno);
    }
    used += size_t(n);
  }
  bytes.resize(used);
  return bytes;
}

inline void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  static std::atomic<uint64_t> counter{0};
  std::string temp;
  int raw_fd = -1;
  do {  // a name can be taken by the temporary of a crashed process that had the same pid
    temp = kiln::detail::cat(path.string(), ".tmp.", ::getpid(), ".", counter++);
    raw_fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (raw_fd < 0 && errno == EEXIST);
  detail::FileDescriptor fd(raw_fd);
  if (fd.get() < 0) detail::throw_os_error(path, "cannot create", errno);
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(temp.c_str());
    detail::throw_os_error(path, what, err);
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write");
    done += size_t(n);
  }
  if (::fsync(fd.get()) != 0) fail("cannot sync");
  if (!fd.close()) fail("cannot write");  // NFS and some quota setups report write errors only at close
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("cannot replace");
  // The rename itself is durable only once the directory is: without this, a crash can bring back the old file.
  detail::fsync_directory_of(path);
}

}  // namespace kiln::io
