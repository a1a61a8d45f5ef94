#include "core/error.h"

namespace bigbatch {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
      return "usage";
    case ErrorKind::Config:
      return "config";
    case ErrorKind::Plan:
      return "plan";
    case ErrorKind::Data:
      return "data";
    case ErrorKind::Format:
      return "format";
    case ErrorKind::Io:
      return "io";
    case ErrorKind::Distributed:
      return "distributed";
    case ErrorKind::Diverged:
      return "diverged";
    case ErrorKind::Memory:
      return "memory";
    case ErrorKind::Model:
      return "model";
  }
  return "unknown";
}

namespace {
std::string join_message(const std::string& problem, const std::string& hint) {
  return hint.empty() ? problem : problem + "; " + hint;
}
}  // namespace

Error::Error(ErrorKind kind, const std::string& problem, const std::string& hint)
    : std::runtime_error(join_message(problem, hint)),
      kind_(kind),
      problem_(problem),
      hint_(hint) {}

void internal_assert_fail(const char* condition, const char* file, int line,
                          const std::string& message) {
  throw InternalError(std::string("internal error (a bug in bigbatch): ") + condition +
                      " failed at " + file + ":" + std::to_string(line) + ": " + message);
}

}  // namespace bigbatch
