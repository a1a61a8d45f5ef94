#include "core/append_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace bigbatch {

AppendFile::AppendFile(const std::string& path, std::string what, Start start)
    : path_(path),
      what_(std::move(what)),
      fd_(::open(path.c_str(),
                 // A link in the run directory is not followed: the run's records stay in it.
                 O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
                     (start == Start::Empty ? O_TRUNC : 0),
                 0644)),
      last_flush_(std::chrono::steady_clock::now()) {
  if (fd_ < 0) {
    throw Error(ErrorKind::Io, "cannot open " + what_ + " '" + path + "': " + std::strerror(errno),
                "check that the run directory is writable");
  }
  // Appending continues a resumed run's file: its length so far counts.
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  flushed_bytes_ = std::max<int64_t>(0, static_cast<int64_t>(end));
}

AppendFile::~AppendFile() {
  try {
    flush();
  } catch (const Error& error) {
    std::fprintf(stderr, "bigbatch: error[%s]: %s\n", to_string(error.kind()), error.what());
  }
  ::close(fd_);
}

void AppendFile::append(std::string_view record) {
  pending_ += record;
  if (std::chrono::steady_clock::now() - last_flush_ >= kFlushInterval)
    flush();
}

void AppendFile::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  if (pending_.empty())
    return;
  // One call for the whole batch (more only when the kernel takes part of it).
  size_t written = 0;
  int error = 0;
  while (written < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + written, pending_.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (error == 0) {
    flushed_bytes_ += static_cast<int64_t>(pending_.size());
    pending_.clear();
    return;
  }
  pending_.clear();
  // A disk that filled mid-batch left part of a record: cut the file back to its last whole
  // one, so that it stays a file of records whatever happens next.
  if (::ftruncate(fd_, static_cast<off_t>(flushed_bytes_)) != 0) {
    // Nothing more can be done; the resume's cut to its checkpoint's length still applies.
  }
  throw Error(ErrorKind::Io,
              "cannot append to " + what_ + " '" + path_ + "': " + std::strerror(error),
              "check the free disk space");
}

}  // namespace bigbatch
