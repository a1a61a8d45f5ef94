#pragma once
// The accumulation engine: one optimizer update assembled from micro-steps, with the exact
// mathematics of one big batch (docs/design.md, invariants 2, 3 and 5).
//
//  - Each micro-step reduces its loss with *sum* and counts its samples and items; backward
//    adds into .grad. Nothing is averaged per micro-batch.
//  - When the window's item count is known in advance (begin_window), backward is seeded with
//    1 / count, so the summed gradients are already the mean; finish_gradients() hands them and
//    the counts to the GradientReducer (the only place ranks communicate, once per update),
//    and the reduced counts check the plan. When it is not known, finish_gradients() divides
//    the reduced sum once by the reduced item count. Either way: the mean over what was really
//    seen, also for short windows and uneven micro-batches.
//  - Clipping, weight decay and the optimizer step then act once, on that mean gradient.
//
//   EngineOptions options;
//   options.clip_norm = 1.0;
//   AccumulationEngine engine(model, *optimizer, reducer, options);
//   engine.begin_window(/*samples=*/256, /*items=*/256);
//   for (const Batch& micro : window) engine.micro_step(micro.inputs, micro.targets);
//   UpdateStats stats = engine.update(lr);
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "batching/batch_plan.h"
#include "data/dataset.h"
#include "device/device.h"
#include "device/precision.h"
#include "dist/gradient_reducer.h"
#include "models/user_module.h"
#include "schedule/lr_schedule.h"
#include "state/counts.h"
#include "state/training_progress.h"
#include "task/prediction_tally.h"
#include "task/task.h"

namespace bigbatch {

class OptimizerShards;

struct EngineOptions {
  double clip_norm = 0.0;  // 0: no clipping
  // Reads the squared norm of the first micro-step's gradient (one pass over the gradients,
  // no extra memory) for the gradient noise scale (stats/gradient_noise.h).
  bool measure_noise = true;
  // ... of the gradient times the optimizer's preconditioner (optim/optimizer.h,
  // adam_preconditioner: the noise of AdamW's and LAMB's update direction) instead of the raw
  // gradient; no measurement before the optimizer's first step.
  bool precondition_noise = false;
  // The classic accumulation bug, for `bigbatch verify`'s own tests only: each micro-step
  // back-propagates its mean loss and the window divides by the micro-step count, which
  // over-weights a short micro-batch. Never set by training.
  bool per_micro_batch_mean_for_tests = false;
  // The forward pass under bf16 autocast; weights, loss and gradients stay fp32.
  Precision precision = Precision::Fp32;
  // Fully connected layers add their weight gradients into .grad inside the GEMM
  // (models/accumulating_linear.h) in fp32 (not under bf16 autocast). With a multi-rank reducer
  // the gradients live in its buckets from the start, so every micro-step adds in place. Off
  // only to compare against autograd's own accumulation.
  bool fuse_gradient_accumulation = true;
  // What the model learns (task/task.h): Task::of(model, data) for a run. Unset: the module's
  // own loss when it computes one, else classification.
  std::optional<Task> task;
  // --shard-optimizer: the optimizer steps this rank's parameters only; after its step the
  // owners' new values are shared, and the preconditioned noise reads the owners' state
  // (optim/optimizer_shards.h). Unset: the optimizer steps every parameter.
  OptimizerShards* shards = nullptr;
};

struct UpdateStats {
  Counts counts;         // the update's samples, items, loss sum and correct items (all ranks)
  double grad_norm = 0;  // L2 norm of the mean gradient, before clipping
  int64_t micro_steps = 0;
  bool stop_requested = false;  // some rank asked to stop after this update
  bool non_finite = false;      // loss or gradient was inf/NaN: the update was skipped
  // The loss was far above the recent ones (stats/loss_spikes.h): skipped too (train_step).
  bool loss_spike = false;
  // A smaller batch nested in the update's, for the gradient noise scale: the first
  // micro-step's mean gradient (or, with ranks and one micro-step, a rank's whole window),
  // its squared norm averaged over the ranks and its size their harmonic mean (0: not
  // measured — one micro-step in one process, a resumed window, or measure_noise off).
  double small_batch = 0;
  double small_batch_sq_norm = 0;
  // The update's mean gradient's squared norm as the noise scale sees it (measured with
  // small_batch): grad_norm squared, or preconditioned under EngineOptions::precondition_noise.
  double big_batch_sq_norm = 0;

  double loss() const { return counts.mean_loss(); }  // mean loss per item
  bool skipped() const { return non_finite || loss_spike; }
};

class AccumulationEngine {
 public:
  AccumulationEngine(torch::nn::Sequential model, torch::optim::Optimizer& optimizer,
                     GradientReducer& reducer, EngineOptions options);

  // Announces the window's counts over all ranks: its samples (the plan always knows them) and
  // its items when they are known in advance (0: not known, such as the tokens of
  // variable-length sequences). With items known, the engine scales each micro-step's summed
  // loss by 1 / items, backward yields the mean gradient directly, and the reduced count
  // becomes a check of the plan; without, the summed gradient is divided after reduction.
  // Either way the result is the exact mean over the window, and the reduced samples are
  // checked against the plan.
  void begin_window(int64_t global_samples, int64_t global_items);

  enum class MicroStep { Accumulate, Last };

  // Forward and backward of one micro-batch; gradients add up in .grad. A batch in host memory
  // is copied to the model's device first (DeviceFeed: pinned buffers are not waited for, and
  // are free again when this returns). Marking the window's
  // last micro-step lets a multi-rank reducer overlap its all-reduce with that backward; the
  // result is the same without the mark.
  void micro_step(const Batch& batch, MicroStep kind = MicroStep::Accumulate);
  // The same, counting the items from the targets (one per label; the non-padding tokens).
  void micro_step(const torch::Tensor& inputs, const torch::Tensor& targets,
                  MicroStep kind = MicroStep::Accumulate);

  // A micro-step whose forward pass and summed loss the caller computed (a loop the user writes:
  // the Python package's Accumulator): backward through `loss_sum` over the micro-batch's
  // `samples` and `items`, exactly as micro_step does after its forward pass.
  void backward_loss(const torch::Tensor& loss_sum, int64_t samples, int64_t items,
                     MicroStep kind = MicroStep::Accumulate);

  // Ends the window: reduce across ranks (gradients and counts in one collective), divide by
  // the global item count unless begin_window() already did, measure the norm, clip.
  // Afterwards every .grad holds the mean gradient of the whole effective batch.
  UpdateStats finish_gradients();

  // Applies the update at rate `lr` (and, given, AdamW's betas and eps for the update's batch:
  // --adam-sqrt-adjust) and clears the gradients for the next window.
  void apply(double lr, const std::optional<AdamHyperparameters>& adam = std::nullopt);

  // Throws the window away without touching the weights or the optimizer state.
  void discard();

  // The window in progress, and its restoration (gradients in parameter order) on resume.
  WindowState window_state() const;
  void restore_window(const WindowState& state, const std::vector<torch::Tensor>& gradients);

  // finish_gradients(), then apply() at `lr`, or discard() when the loss or the gradient is
  // not finite: one bad window must not poison the weights or the momentum. (train_step
  // does the same steps with a loss-spike verdict and a rate from the run schedule between.)
  UpdateStats update(double lr);

  const std::vector<torch::Tensor>& parameters() const { return parameters_; }

  // Asks every rank to stop after the current update: the request travels with the window's
  // totals, so all ranks see it at the same update and none waits in a collective.
  void request_stop() { stop_requested_ = true; }

 private:
  // What follows a micro-batch's forward pass: the counts, and backward into .grad.
  void backward_micro_batch(const torch::Tensor& loss, int64_t samples, int64_t items,
                            MicroStep kind);
  WindowTotals local_totals() const;
  void read_first_gradient(int64_t items);
  // Whether this window's gradients can be measured for the noise scale: always for the raw
  // gradient; with the preconditioner once it exists (read at the window's first micro-step,
  // or asked of its owners when sharded).
  bool noise_measurable() const;
  bool preconditioned_and_sharded() const {
    return options_.precondition_noise && options_.shards != nullptr;
  }
  // The squared norm of `gradients` as the noise scale measures it (times the preconditioner
  // when preconditioned); gradients in parameter order, undefined ones left out. `whole`: the
  // update's reduced gradients, whose preconditioned norms the owners compute when sharded;
  // else a rank's own, whose preconditioner is streamed from the owners.
  double noise_sq_norm(const std::vector<torch::Tensor>& gradients, bool whole) const;

  torch::nn::Sequential model_;
  torch::optim::Optimizer& optimizer_;
  GradientReducer& reducer_;
  EngineOptions options_;
  // A module that computes its own loss counts its own items: its windows' items are known only
  // from it, so they are divided by after the reduction.
  Task task_;
  std::vector<torch::Tensor> parameters_;
  DeviceFeed feed_;        // host batches to the model's device
  PredictionTally tally_;  // the window's loss and correct predictions on this rank
  int64_t samples_ = 0;    // the window's samples and items on this rank
  int64_t items_ = 0;
  int64_t micro_steps_ = 0;
  int64_t expected_samples_ = 0;  // from begin_window(); 0: not announced
  int64_t expected_items_ = 0;    // from begin_window(); 0: count after the fact
  torch::Tensor backward_seed_;   // 1 / seed_items_, the gradient backward starts from
  int64_t seed_items_ = 0;
  bool stop_requested_ = false;
  bool local_norm_available_ = false;  // the reducer reads this rank's pre-reduction norm
  int64_t first_items_ = 0;  // the first micro-step's items, when its gradient norm was read
  double first_sq_norm_ = 0;
  // The optimizer's preconditioner for this window (precondition_noise, unsharded), in
  // parameter order.
  std::vector<torch::Tensor> noise_weights_;
};

// Told after each micro-step of a window how many are done of how many; returning false
// leaves the window open (for a checkpoint).
using MicroStepCallback = std::function<bool(int64_t micro_steps_done, int64_t micro_steps)>;

// Runs this rank's micro-steps of `window` from micro-step `first` (non-zero after a
// mid-window resume), calling `after_micro_step` (if set) after each; returns false as soon as
// it returns false. The rank's samples are its share of `order` (positions window.rank_begin
// on), or `rank_rows` in that order when given (a share repacked by tokens).
bool run_micro_steps(AccumulationEngine& engine, BatchAssembler& assembler,
                     const std::vector<int64_t>& order, const UpdateWindow& window, int64_t first,
                     const MicroStepCallback& after_micro_step,
                     const std::vector<int64_t>* rank_rows = nullptr);

}  // namespace bigbatch
