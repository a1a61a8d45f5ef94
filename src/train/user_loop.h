#pragma once
// The engine under a loop the user writes (the Python package's bigbatch.Accumulator): the user
// runs the forward pass and computes each micro-batch's summed loss; the engine owns the rest of
// an update, exactly as `bigbatch train` does it: which samples each window and micro-batch
// holds (the epoch's order, the plan's cut, this rank's share), the counts, backward into .grad
// seeded as the engine seeds it, the one reduction over ranks, the one division by the update's
// items, clipping, the optimizer at the rate of the run schedule, and the gradient noise scale.
// The parameters are the caller's own tensors: the optimizer updates them in place.
//
//   UserLoop loop(config, dataset_size, named_parameters);
//   while (!loop.complete()) {
//     const auto micro_batches = loop.next_window();   // dataset indices, this rank's share
//     for (size_t i = 0; i < micro_batches.size(); ++i)
//       loop.backward(loss_sum_of(micro_batches[i]), micro_batches[i].size(), items,
//                     /*last=*/i + 1 == micro_batches.size());
//     const UserLoopStep step = loop.step();
//   }
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/resolved_run.h"
#include "config/train_config.h"
#include "dist/gradient_reducer.h"
#include "schedule/run_schedule.h"
#include "session/session.h"
#include "state/training_progress.h"
#include "stats/gradient_noise.h"
#include "train/accumulation_engine.h"

namespace bigbatch {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// One update's outcome, as the user's loop sees it.
struct UserLoopStep {
  int64_t step = 0;  // updates done, this one included
  int64_t epoch = 0;
  int64_t samples = 0;  // the update's samples and items over all ranks
  int64_t items = 0;
  double loss = 0;       // mean loss per item
  double grad_norm = 0;  // of the mean gradient, before clipping
  double lr = 0;
  bool skipped = false;    // a loss or gradient that was not finite: nothing applied
  double noise_scale = 0;  // B_noise so far (0: not measured yet)
};

// Where a loop of the user's stands between updates: its progress (the counters a checkpoint's
// state.json holds, the noise scale's averages among them) with what it was planned for, and
// the optimizer's state. The module's weights are the caller's to save beside it.
struct UserLoopState {
  nlohmann::json progress;  // {"plan": what must match, "progress": the counters}
  std::string optimizer;    // torch's archive format
};

class UserLoop {
 public:
  // `config`: validated; its batch sizes, optimizer, rate, schedule and length are the run's.
  // `dataset_size`: the samples an epoch holds. `parameters`: the module's trainable tensors by
  // name, updated in place.
  UserLoop(const TrainConfig& config, int64_t dataset_size, NamedTensors parameters,
           JobPlace job = {});

  // The next update's micro-batches on this rank, as indices into the dataset, and opens the
  // window. An epoch that is used up moves on to the next one.
  std::vector<std::vector<int64_t>> next_window();
  // Backward through one micro-batch's summed loss (`samples` of them, `items` to average over).
  void backward(const torch::Tensor& loss_sum, int64_t samples, int64_t items, bool last);
  // Ends the window: one reduction, one division, clipping, the optimizer step at the update's
  // rate; a non-finite loss or gradient discards the window instead.
  UserLoopStep step();
  // The state between updates; load_state puts it back into a loop made with the same
  // configuration over the same parameters, which then goes on exactly as the saved one would.
  UserLoopState state() const;
  void load_state(const UserLoopState& state);

  // The run's length (--epochs, --max-updates) is reached.
  bool complete() const { return schedule_->complete(at_); }

  const ResolvedRun& resolved() const { return resolved_; }
  const JobPlace& job() const { return job_; }
  const TrainingProgress& progress() const { return at_; }
  const torch::optim::Optimizer& optimizer() const { return *optimizer_; }

 private:
  // What a saved state must have been planned with to go on here.
  nlohmann::json identity() const;

  TrainConfig config_;
  JobPlace job_;
  int64_t dataset_size_ = 0;
  ResolvedRun resolved_;
  std::unique_ptr<RunSchedule> schedule_;
  torch::nn::Sequential holder_{nullptr};  // the caller's tensors as one module's parameters
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<AccumulationEngine> engine_;
  NoiseScaleTracker noise_;
  TrainingProgress at_;
  std::vector<int64_t> order_;  // the epoch's sample order
  int64_t order_epoch_ = -1;
  UpdateWindow window_;  // the window open, or size 0
  int64_t micro_steps_done_ = 0;
};

}  // namespace bigbatch
