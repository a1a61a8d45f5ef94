#pragma once
// The set-up's engine stage (train/training_run.h): the reducer for this process's place in the
// job, the micro-batch when it is measured, the optimizer over the model's parameters, the
// accumulation engine over them, and the thread count.
//
//   auto reducer = make_reducer(job, config);
//   run.optimizer = build_optimizer(run, console);
//   build_engine(run, partial, console);
//   tune_threads(run, console);
#include <torch/torch.h>

#include <memory>

#include "checkpoint/checkpoint.h"
#include "console/console.h"
#include "dist/gradient_reducer.h"
#include "session/session.h"
#include "train/micro_batch_fit.h"
#include "train/training_run.h"

namespace bigbatch {

// LocalReducer for one process, the collective reducer (c10d: Gloo, or NCCL on CUDA) for a job.
std::unique_ptr<GradientReducer> make_reducer(const JobPlace& job, const TrainConfig& config);

// --micro-batch auto: measured on every rank (each has the same budget); rank 0's choice is
// everyone's, since timings differ between processes. Under a ramp the micro-batch serves
// every step, so it is fitted to the smallest. Writes the choice into `config`.
void choose_micro_batch(TrainConfig& config, const TensorDataset& train, const JobPlace& job,
                        GradientReducer& reducer, Console& console, const ModelFactory& make_model);

// The configured optimizer over the run's model (adamw's betas as the batch regime resolved
// them), announced; under --shard-optimizer over ranks, this rank's share (r.shards).
std::unique_ptr<torch::optim::Optimizer> build_optimizer(TrainingRun& r, Console& console);

// The engine (and --bn-mode window's statistics pass) over the model and optimizer, with a
// window restored from a mid-window checkpoint.
void build_engine(TrainingRun& r, const PartialWindow& partial, Console& console);

// --threads auto: 1 against the CPUs available, timed on a real micro-batch; the count is
// written back into the run's configuration (and config.toml).
void tune_threads(TrainingRun& r, Console& console);

}  // namespace bigbatch
