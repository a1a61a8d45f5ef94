#pragma once
// `bigbatch launch`: starts and supervises the local workers of a data-parallel job.
//  - Each worker gets torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//    GROUP_RANK, MASTER_ADDR, MASTER_PORT) and, unless set, OMP_NUM_THREADS = CPUs / workers.
//  - Their stdout and stderr lines come out prefixed with "[rank R] ".
//  - SIGINT / SIGTERM are forwarded to every worker; a second one kills them.
//  - When a worker fails, the others get SIGTERM, then SIGKILL after a grace period; the
//    launcher reaps every child and returns the failing rank's exit code, naming the rank and
//    its last error line.
// Torch-free (POSIX only).
//
//   LaunchOptions options;
//   options.nproc = 4;
//   options.command = {"bigbatch", "train", "--global-batch", "1024"};
//   return run_launcher(options);
#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct LaunchOptions {
  int64_t nproc = 1;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  double grace_seconds = 5.0;  // between SIGTERM and SIGKILL when stopping workers
  std::vector<std::string> command;

  void validate() const;  // bigbatch::Error (Usage) on values that cannot work
};

// Runs the job; returns the exit code for the launcher (0, or the first failing worker's).
int run_launcher(const LaunchOptions& options);

// The variable the launcher sets in its workers: the launch command that starts the job again,
// up to its `--` ("bigbatch launch --nproc 2"; with the hosts' flags for several), so a worker
// stopped by Ctrl-C can say how to resume it (DistEnvironment::relaunch).
inline constexpr const char* kRelaunchVariable = "BIGBATCH_RELAUNCH";
std::string relaunch_prefix(const LaunchOptions& options);

}  // namespace bigbatch
