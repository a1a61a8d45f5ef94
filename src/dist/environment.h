#pragma once
// Where this process stands in a data-parallel job, read from the environment that launchers
// set: torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; what
// `bigbatch launch` sets), Open MPI's mpirun (OMPI_COMM_WORLD_*) and Slurm's srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). MASTER_ADDR and MASTER_PORT name the rendezvous
// (rank 0's c10d TCP store) in every case. Torch-free, so every error path is unit-tested.
//
//   auto env = read_dist_environment(process_environment);
//   if (!env) ...;                    // no launcher: one process
//   env->rank, env->world_size, env->master_addr, env->master_port
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace bigbatch {

struct DistEnvironment {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  std::string source;  // "torchrun", "Open MPI" or "Slurm", for the log
  // torchrun's agent already serves the rendezvous store at MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank is its client, rank 0 included.
  bool agent_store = false;
  // `bigbatch launch`'s command up to its `--` (BIGBATCH_RELAUNCH), to say how the job starts
  // again; empty under other launchers.
  std::string relaunch;
};

// Looks a variable up; std::nullopt when unset.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string&)>;
std::optional<std::string> process_environment(const std::string& name);

// std::nullopt when no launcher variables are set (a single process). A world of one is
// returned as such. Inconsistent or incomplete variables are a bigbatch::Error (Distributed)
// naming the variable and the fix.
std::optional<DistEnvironment> read_dist_environment(const EnvironmentLookup& lookup);

}  // namespace bigbatch
