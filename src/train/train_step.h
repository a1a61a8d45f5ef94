#pragma once
// The train-step level: one optimizer update, from the window's micro-batches to the applied
// step. `bigbatch train` runs every update through train_step, and so do the equivalence tests
// and the in-process benchmark (through train_window, its constant-rate form): what is tested
// and measured is what trains.
//
//   one update:  [window BatchNorm: statistics pass]
//                micro-steps (forward, summed loss, backward into .grad, counts += )
//                finish: reduce (one collective: gradients + counts) -> mean -> norm -> clip
//                judge: not finite, or a loss spike against the recent applied losses
//                rate: the noise scale takes the update's two batch sizes, then the run
//                      schedule's rate (AdaScale's gain needs both)
//                apply the optimizer step at that rate, or discard the window
//
//   StepRequest request{order, window};
//   request.schedule = &schedule;  request.at = &at;   // or request.lr = 0.1
//   StepResult result = train_step(engine, assembler, request);
#include <cstdint>
#include <functional>
#include <vector>

#include "batching/batch_plan.h"
#include "data/dataset.h"
#include "schedule/run_schedule.h"
#include "stats/gradient_noise.h"
#include "train/accumulation_engine.h"
#include "train/window_batch_norm.h"

namespace bigbatch {

struct StepRequest {
  StepRequest(const std::vector<int64_t>& order_in, const UpdateWindow& window_in)
      : order(order_in), window(window_in) {}

  const std::vector<int64_t>& order;  // the epoch's sample order
  const UpdateWindow& window;         // this update's positions in it, this rank's share
  // Micro-steps already done (a window restored from a mid-window checkpoint).
  int64_t first_micro_step = 0;
  // The rate: the run schedule's at `at`, from the update's measured gradients; or, without a
  // schedule, `lr` (the equivalence tests, verify, the benchmarks).
  const RunSchedule* schedule = nullptr;
  const TrainingProgress* at = nullptr;
  double lr = 0;
  // Called after each micro-step with the count done and the window's count; returning false
  // leaves the window open (for a checkpoint) and train_step returns at once.
  MicroStepCallback after_micro_step;
  // --micro-batch-tokens (token rows only; 0: the window's own micro-batches): this rank's
  // share sorted by length and cut into micro-batches of at most this many padded tokens
  // (batching/token_packing.h).
  int64_t micro_batch_tokens = 0;
  // Ask every rank to stop after this update (a signal arrived during its micro-steps).
  std::function<bool()> stop_requested;
  WindowBatchNorm* window_bn = nullptr;  // --bn-mode window
  NoiseScaleTracker* noise = nullptr;    // the gradient noise scale, fed every measured update
  // A finite update whose loss is over `spike_factor` times the median of these recent
  // applied losses is a loss spike, skipped like a non-finite one (stats/loss_spikes.h);
  // none or a factor of 0: every finite update is applied.
  const std::vector<double>* recent_losses = nullptr;
  double spike_factor = 0;
  // Called once the gradients are final, before the optimizer step (verify reads them).
  std::function<void()> on_final_gradients;
  // Waits for the device (a GPU runs asynchronously): set, the micro-steps' time is theirs
  // and not the rest of the update's (StepResult::gradient_seconds).
  std::function<void()> synchronize;
};

struct StepResult {
  bool completed = false;  // false: left open by after_micro_step
  UpdateStats stats;       // valid when completed
  UpdateRate rate;
  int64_t padded_tokens = 0;  // token rows: positions computed, padding included
  // The micro-steps' time (paid per sample; the rest of the update is paid once per update).
  double gradient_seconds = 0;
};

// Runs the update. An out-of-memory error inside the micro-steps (c10::OutOfMemoryError)
// propagates with the window discarded, so the caller can cut it smaller and run it again.
StepResult train_step(AccumulationEngine& engine, BatchAssembler& assembler,
                      const StepRequest& request);

// The noise scale needs two nested batch sizes: the update's, and a smaller one measured
// inside it (none for a single micro-step in one process, or a window resumed mid-way).
// `global_batch`: the update's planned batch in samples, which its memory is counted in.
void feed_noise_scale(NoiseScaleTracker& noise, const UpdateStats& stats, int64_t global_batch);

// train_step at a constant rate, from the window's first micro-step.
UpdateStats train_window(AccumulationEngine& engine, BatchAssembler& assembler,
                         const std::vector<int64_t>& order, const UpdateWindow& window, double lr);

}  // namespace bigbatch
