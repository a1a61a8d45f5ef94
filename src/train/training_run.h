#pragma once
// The set-up level of `bigbatch train` (train/trainer.h): everything the fit loop needs,
// resolved and built once before the first update, in two parts. The set-up — this process's
// place in the job, the configuration, the data, the resolved plan, the run directory, model,
// optimizer, reducer and engine — is fixed once set_up_training returns (the model's weights
// and the optimizer's state train, nothing is replaced or rewritten). RunState is where the run
// stands and the batch regime that moves it, from a fresh run's zeros or a checkpoint's: the
// fit loop's to change, and what a checkpoint holds besides the weights and the optimizer.
//
//   Session session = open_session(config, training_session_request(config));
//   Console console(session.job.is_main(), ProgressMode::Auto);
//   TrainingRun run = set_up_training(std::move(session), console);
//   FitLoop(run, console).run();
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "config/resolved_run.h"
#include "config/train_config.h"
#include "console/console.h"
#include "core/files.h"
#include "data/dataset.h"
#include "device/precision.h"
#include "dist/gradient_reducer.h"
#include "optim/optimizer_shards.h"
#include "report/metrics_writer.h"
#include "report/tensorboard_log.h"
#include "schedule/run_schedule.h"
#include "session/session.h"
#include "state/training_progress.h"
#include "task/task.h"
#include "train/accumulation_engine.h"
#include "train/custom_problem.h"
#include "train/run_directory.h"
#include "train/window_batch_norm.h"

namespace bigbatch {

// Where the run stands, and the batch regime from there.
struct RunState {
  // The batch regime (schedule/run_schedule.h): the plan in force, whose micro-batch may shrink
  // (an out-of-memory back-off) and whose global batch a ramp or the automatic batch moves, the
  // rate of each update and the run's length.
  std::unique_ptr<RunSchedule> schedule;
  // Where the run stands: zeros, or the checkpoint's counters (and its open window).
  TrainingProgress at;
  // The update whose announcements metrics.jsonl already holds: one a checkpoint inside its
  // window was taken in, when the file was cut back exactly to that checkpoint (-1: none).
  int64_t update_already_logged = -1;
};

struct TrainingRun {
  TrainingRun(TrainConfig config_in, JobPlace job_in, DatasetSplits data_in,
              ResolvedRun resolved_in)
      : config(std::move(config_in)),
        job(std::move(job_in)),
        data(std::move(data_in)),
        resolved(std::move(resolved_in)) {}

  // Rank 0's lock on the run directory (core/files.h). First, so that it is released last,
  // after everything else of the run has been written and closed.
  std::unique_ptr<DirectoryLock> directory_lock;

  // The configuration with what the set-up resolved written back (a measured micro-batch, the
  // thread count), so config.toml repeats the run exactly. Never rewritten while training.
  TrainConfig config;
  JobPlace job;
  DatasetSplits data;
  // The plan, schedule and length as resolved at start-up (what plan.txt describes first;
  // state.schedule moves on from there).
  ResolvedRun resolved;
  std::string run_dir;
  // This start made the run directory itself (it did not exist before).
  bool made_run_dir = false;
  bool resuming = false;
  // A resumed run that had already finished (its final weights written, nothing left to
  // train under the resolved length): set up no further and changed nothing.
  bool finished = false;
  // A resume from a checkpoint older than the run's newest (--discard-newer).
  bool abandons_newer = false;
  // adamw's betas follow the batch by the automatic batch's default, not by the flag (config
  // has it resolved): the start line says so, and how to keep them.
  bool adam_sqrt_adjust_by_default = false;
  Precision precision = Precision::Fp32;
  // Where the model, its batches, gradients and optimizer state live (device/device.h).
  torch::Device device{torch::kCPU};

  std::unique_ptr<GradientReducer> reducer;
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // this rank's share under `shards`
  std::unique_ptr<OptimizerShards> shards;             // --shard-optimizer over ranks
  std::unique_ptr<AccumulationEngine> engine;
  // --bn-mode window on a model with BatchNorm: each window's statistics pass.
  std::unique_ptr<WindowBatchNorm> window_bn;
  std::unique_ptr<MetricsWriter> metrics;       // rank 0 only
  std::unique_ptr<TensorBoardLog> tensorboard;  // rank 0, unless --no-tensorboard

  // What a checkpoint must match to be resumed into this run.
  nlohmann::json identity;
  // The resolved --threads (measured when auto).
  int64_t threads = 1;

  // The loop's part.
  RunState state;

  // What the model learns from the data (task/task.h), with the run's label smoothing.
  Task task() const {
    return Task::of(*model, data.train).with_label_smoothing(config.label_smoothing);
  }
  // The resolved run with the plan in force: what checkpoints and plan.txt describe.
  ResolvedRun resolved_now() const;
  // Writes config.toml and plan.txt (rank 0).
  void write_description() const;
  // The model's weights at update `step` into `path`, with what rebuilds and feeds the model
  // (its name and widths, how the inputs were prepared, the samples' layout) and `extra` in the
  // metadata.
  void save_model_weights(const std::string& path, int64_t step,
                          const std::map<std::string, std::string>& extra = {}) const;
  // A new run that fails before its first update and wrote no checkpoint (a module that breaks
  // its contract in the first backward, a bad thread probe): removes what its start wrote, and
  // the directory when this start made it, so the same --out can be used again. Anything else
  // is kept.
  void discard_unstarted();
  // A new run whose module broke its contract after some updates, before any checkpoint: there
  // is nothing to resume from, and a resume would meet the error again. Its records (metrics,
  // config, plan, events, best weights, report) move to RUN/abandoned/failed-..., so nothing is
  // lost and the same --out can be used again. Returns that directory; empty when the run is
  // kept as it is (it has a checkpoint, is a resume, or is not rank 0).
  std::string set_failed_run_aside();
};

// What train asks of its session (session/session.h): a rank of the environment's job, memory
// counted against --memory-budget, and, before the device and the data, the outputs checked
// that the run will write. `custom_data`: a C++ program brings its own data (none is loaded).
SessionRequest training_session_request(bool custom_data = false);

// Resolves and builds the run from an open session (its configuration validated, its device,
// CPU and data set up). Bad input is a bigbatch::Error before anything is written: a new run
// directory appears only once the data, the plan and the weights are accepted.
// `problem`: a C++ program's own model and data (train/custom_problem.h), or null.
TrainingRun set_up_training(Session session, Console& console,
                            const CustomProblem* problem = nullptr);

}  // namespace bigbatch
