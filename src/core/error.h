#pragma once
// Errors in two tiers (see docs/design.md):
//  - bigbatch::Error: the user can fix it (a flag, a config key, a data file, a checkpoint).
//    The message is one line: what failed, the value seen, what was expected, and a hint.
//    The CLI prints it as "bigbatch: error[<kind>]: <message>" and exits non-zero
//    (apps/bigbatch/commands.h lists the codes).
//  - BB_INTERNAL_ASSERT: a broken invariant inside bigbatch; never caused by input.
//
//   if (micro <= 0)
//     throw Error(ErrorKind::Plan, "micro batch must be positive, got " + std::to_string(micro),
//                 "pass --micro-batch 32 or another positive size");
#include <stdexcept>
#include <string>

namespace bigbatch {

enum class ErrorKind {
  Usage,        // command-line flags
  Config,       // TOML configuration or option values
  Plan,         // batch sizes that do not fit together
  Data,         // dataset files
  Format,       // weight files (safetensors) and checkpoints
  Io,           // the file system: unwritable run directory, disk full
  Distributed,  // launcher environment, rendezvous, a peer rank that failed or timed out
  Diverged,     // too many updates in a row skipped (non-finite, or loss spikes)
  Memory,       // the memory budget cannot hold even the smallest micro-batch
  Model,        // a user's model (TorchScript) that does not load or keeps not to the contract
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& problem, const std::string& hint = {});
  ErrorKind kind() const { return kind_; }
  const std::string& problem() const { return problem_; }
  const std::string& hint() const { return hint_; }

 private:
  ErrorKind kind_;
  std::string problem_;
  std::string hint_;
};

// Throws Error(Config, problem, hint) unless `ok`: the one-line check of a configured value.
inline void check_config(bool ok, const std::string& problem, const std::string& hint) {
  if (!ok)
    throw Error(ErrorKind::Config, problem, hint);
}

// Training stopped by SIGINT/SIGTERM after writing a checkpoint; the CLI exits 128 + signal.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal_number, const std::string& message)
      : std::runtime_error(message), signal_number_(signal_number) {}
  int signal_number() const { return signal_number_; }

 private:
  int signal_number_;
};

// A violated internal invariant: a bug in bigbatch, not in the input.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void internal_assert_fail(const char* condition, const char* file, int line,
                                       const std::string& message);

}  // namespace bigbatch

#define BB_INTERNAL_ASSERT(condition, message)                                     \
  do {                                                                             \
    if (!(condition)) {                                                            \
      ::bigbatch::internal_assert_fail(#condition, __FILE__, __LINE__, (message)); \
    }                                                                              \
  } while (false)
