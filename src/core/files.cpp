#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {
[[noreturn]] void io_error(const std::string& what, const std::string& path, int error_number) {
  throw Error(ErrorKind::Io, what + " '" + path + "': " + std::strerror(error_number),
              "check the path, its permissions and the free disk space");
}

void write_all(int fd, const std::string& content, const std::string& path) {
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int saved = errno;
      ::close(fd);
      ::unlink(path.c_str());
      io_error("cannot write", path, saved);
    }
    written += static_cast<size_t>(n);
  }
}
}  // namespace

std::string absolute_path(const std::string& path) {
  if (path.empty())
    return path;
  std::error_code ignored;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ignored);
  return absolute.empty() ? path : absolute.lexically_normal().string();
}

std::string parent_directory(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

namespace {

// What kind of file stands at `info`, in words, for a refusal.
const char* file_kind(const struct stat& info) {
  if (S_ISCHR(info.st_mode))
    return "a character device";
  if (S_ISBLK(info.st_mode))
    return "a block device";
  if (S_ISFIFO(info.st_mode))
    return "a named pipe";
  if (S_ISSOCK(info.st_mode))
    return "a socket";
  if (S_ISDIR(info.st_mode))
    return "a directory";
  return "not a regular file";
}

// A file is replaced by renaming a complete new one onto it: right for a regular file, wrong
// for a device, a pipe or a socket (renaming onto /dev/null would replace the system's).
void refuse_irregular_target(const std::string& path, const std::string& target,
                             const std::string& what, const std::string& example_name) {
  struct stat info {};
  if (::stat(target.c_str(), &info) != 0 || S_ISREG(info.st_mode))
    return;
  if (S_ISDIR(info.st_mode)) {
    throw Error(ErrorKind::Io, what + " '" + path + "' is a directory",
                example_name.empty() ? std::string("give the path of a file")
                                     : "give a file name, e.g. " +
                                           (std::filesystem::path(path) / example_name).string());
  }
  throw Error(ErrorKind::Io,
              what + " '" + path + "' is " + file_kind(info) + ", not a regular file",
              "give the path of a regular file: bigbatch writes a complete new file and renames "
              "it into place");
}

}  // namespace

std::string write_target(const std::string& path) {
  // The link's chain followed by hand: the file it names need not exist yet, and
  // std::filesystem's canonical forms resolve only what exists.
  std::filesystem::path target(path);
  std::error_code error;
  for (int hops = 0; hops < 40 && std::filesystem::is_symlink(target, error); ++hops) {
    const std::filesystem::path next = std::filesystem::read_symlink(target, error);
    if (error)
      break;
    target = (next.is_absolute() ? next : target.parent_path() / next).lexically_normal();
  }
  return target.string();
}

void check_output_file(const std::string& path, const std::string& what,
                       const std::vector<std::string>& inputs, const std::string& example_name) {
  const std::string target = write_target(path);
  const std::string dir = parent_directory(target);
  const std::string shown =
      "'" + path + "'" + (target == path ? std::string() : " (a link to '" + target + "')");
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw Error(ErrorKind::Io, what + " " + shown + ": the directory '" + dir + "' does not exist",
                "create it first, or give a path in an existing directory");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw Error(ErrorKind::Io, what + " " + shown + ": the directory '" + dir + "' is not writable",
                "choose a directory you can write to");
  }
  refuse_irregular_target(path, target, what, example_name);
  for (const std::string& input : inputs) {
    std::error_code error;
    if (!input.empty() && std::filesystem::equivalent(target, input, error) && !error) {
      throw Error(ErrorKind::Io, what + " '" + path + "' is the input '" + input + "' itself",
                  "write to another file: the input would be overwritten");
    }
  }
}

void atomic_write_file(const std::string& requested, const std::string& content, Links links) {
  // Follow: through a symbolic link to the file it names, the link stays and its target is
  // replaced. Replace: the rename replaces the link itself.
  const std::string path = links == Links::Follow ? write_target(requested) : requested;
  struct stat here {};
  const bool link = ::lstat(path.c_str(), &here) == 0 && S_ISLNK(here.st_mode);
  if (!link)
    refuse_irregular_target(requested, path, "output file", "");
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  // A new file of its own, never one found under the temporary name (a link, a stale file).
  ::unlink(temporary.c_str());
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    io_error("cannot create", temporary, errno);
  write_all(fd, content, temporary);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    io_error("cannot flush", temporary, saved);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    io_error("cannot rename onto", path, saved);
  }
  // Make the rename itself durable.
  const int dir = ::open(parent_directory(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void ensure_directory(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error || !std::filesystem::is_directory(path)) {
    throw Error(ErrorKind::Io,
                "cannot create directory '" + path + "'" + (error ? ": " + error.message() : ""),
                "check the path and its permissions, or choose another --out");
  }
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

DirectoryLock::DirectoryLock(const std::string& dir) {
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    io_error("cannot create the lock file", path, errno);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;  // the whole file: start 0, length 0
  if (::fcntl(fd_, F_SETLK, &lock) == 0)
    return;
  const int error_number = errno;
  struct flock holder {};
  holder.l_type = F_WRLCK;
  holder.l_whence = SEEK_SET;
  const bool known = ::fcntl(fd_, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
  ::close(fd_);
  fd_ = -1;
  if (error_number != EACCES && error_number != EAGAIN)
    io_error("cannot lock", path, error_number);
  throw_in_use(dir, known ? std::optional<int64_t>(holder.l_pid) : std::nullopt);
}

void DirectoryLock::throw_in_use(const std::string& dir, std::optional<int64_t> pid) {
  throw Error(ErrorKind::Io,
              "run directory '" + dir + "' is in use" +
                  (pid ? " by pid " + std::to_string(*pid) : std::string(" by another process")),
              "wait for that run to finish (or stop it), or train into another --out");
}

void DirectoryLock::refuse_if_held(const std::string& dir) {
  // Opened to read, never created: probing writes nothing into someone else's directory.
  const int fd = ::open((dir + "/.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  struct flock holder {};
  holder.l_type = F_WRLCK;
  holder.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
  ::close(fd);  // this process holds no lock on it to lose
  if (held)
    throw_in_use(dir, holder.l_pid);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0)
    ::close(fd_);
}

void DataDigest::add(const void* data, size_t size) {
  const auto* bytes = static_cast<const Bytef*>(data);
  // crc32() takes at most uInt bytes a call.
  for (size_t at = 0; at < size; at += (1u << 30)) {
    const size_t n = std::min<size_t>(size - at, 1u << 30);
    crc_ = crc32(crc_, bytes + at, static_cast<uInt>(n));
  }
  size_ += size;
}

std::string DataDigest::value() const {
  char text[16];
  std::snprintf(text, sizeof text, "%08lx", crc_);
  return std::string("crc32:") + text + "/" + std::to_string(size_);
}

std::string data_digest(const void* data, size_t size) {
  DataDigest digest;
  digest.add(data, size);
  return digest.value();
}

std::string file_digest(const std::string& path) {
  const std::string bytes = read_text_file(path);
  return data_digest(bytes.data(), bytes.size());
}

std::string read_text_file(const std::string& path, int64_t max_bytes) {
  // Only regular files: a directory would read as empty, a FIFO block forever and a device
  // such as /dev/zero never end (issue 21).
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode)) {
    const char* what = S_ISDIR(status.st_mode)    ? "a directory"
                       : S_ISFIFO(status.st_mode) ? "a FIFO"
                       : S_ISSOCK(status.st_mode) ? "a socket"
                                                  : "a device";
    throw Error(ErrorKind::Io, "'" + path + "' is " + what + ", not a regular file",
                "give the path of a file");
  }
  if (max_bytes > 0 && status.st_size > max_bytes) {
    throw Error(ErrorKind::Io,
                "'" + path + "' is " + human_bytes(double(status.st_size)) +
                    ", more than a file of its kind can hold (" + human_bytes(double(max_bytes)) +
                    ")",
                "check that this is the right file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    io_error("cannot read", path, errno ? errno : ENOENT);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace bigbatch
