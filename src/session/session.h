#pragma once
// The one door every command that reads a configuration enters by (train, plan, fit, verify,
// lr-find, evaluate, predict, sample, the C++ library, and the Python package): the
// configuration validated once, this process's place in the job, the device, the memory
// accounting, the CPU's settings and the data, in that order, so that what cannot work is said
// before what takes time (a corpus can take minutes to load). A command asks for the steps it
// needs; the session is read-only once opened.
//
//   SessionRequest request;
//   request.job = JobScope::FromEnvironment;
//   request.memory = MemoryAccounting::Budgeted;
//   const Session session = open_session(config, request);
//   ... session.config, session.job, session.device, session.data
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "config/train_config.h"
#include "data/dataset.h"
#include "dist/environment.h"

namespace bigbatch {

// This process's place in the job: one process, or a rank of a launcher's job.
struct JobPlace {
  std::optional<DistEnvironment> env;
  int64_t world_size = 1;
  int64_t rank = 0;
  bool is_main() const { return rank == 0; }  // only rank 0 talks, writes and evaluates
  // This rank's place among the ranks of its machine (its GPU under --device cuda).
  int64_t local_rank() const { return env ? env->local_rank : 0; }
};
// The job the environment describes (torchrun's, Open MPI's or Slurm's variables), or one
// process.
JobPlace read_job_place();

// Whose job a command's process is part of: train runs as a rank of a launcher's job; every
// other command computes alone.
enum class JobScope { OneProcess, FromEnvironment };
// Whether tensor memory is counted against --memory-budget (train and fit, whose budget it is).
enum class MemoryAccounting { Off, Budgeted };
// What the session sets up besides the validated configuration.
enum class SessionDevice { None, Resolve };      // --device resolved and checked (plan needs none)
enum class SessionCpu { Untouched, Configure };  // threads and floating-point mode
enum class SessionData { None, Load };           // the dataset the configuration names

struct SessionRequest {
  JobScope job = JobScope::OneProcess;
  SessionDevice device = SessionDevice::Resolve;
  MemoryAccounting memory = MemoryAccounting::Off;
  SessionCpu cpu = SessionCpu::Configure;
  SessionData data = SessionData::Load;
  // The command's own checks of the validated configuration, after the job is known and before
  // the device and the data: what a run would write is refused before a corpus loads.
  std::function<void(const TrainConfig&, const JobPlace&)> check_before_data;
};

struct Session {
  TrainConfig config;  // validated; as requested (nothing resolved into it yet)
  JobPlace job;
  torch::Device device{torch::kCPU};
  int64_t threads = 1;              // the resolved --threads (0 = auto: the cores' count)
  bool flushing_denormals = false;  // x86 FTZ/DAZ in effect (device/resources.h)
  DatasetSplits data;               // empty unless SessionData::Load
};

Session open_session(const TrainConfig& config, const SessionRequest& request);

// The dataset stays in host memory whatever the device (a GPU run copies micro-batches over),
// so it is not part of the budget, which covers what a training step needs. The controller's
// slice (--growth-holdout) is already set aside from the training set.
DatasetSplits load_data_outside_budget(const TrainConfig& config);
// --growth-holdout: the last N training samples become `data.controller` (a C++ program's own
// data goes through it too).
DatasetSplits set_aside_controller_slice(DatasetSplits data, const TrainConfig& config);

}  // namespace bigbatch
