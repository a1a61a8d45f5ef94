#include "train/train_step.h"

namespace bigbatch {

namespace {

// The noise scale needs two nested batch sizes: the update's, and a smaller one measured
// inside it (none for a single micro-step in one process, or a window resumed mid-way).
void feed_noise_scale(NoiseScaleTracker& noise, const UpdateStats& stats) {
  const double items = double(stats.counts.items);
  if (stats.non_finite || stats.small_batch <= 0 || stats.small_batch >= items)
    return;
  noise.add(
      {stats.small_batch, stats.small_batch_sq_norm, items, stats.grad_norm * stats.grad_norm});
}

}  // namespace

StepResult train_step(AccumulationEngine& engine, BatchAssembler& assembler,
                      const StepRequest& request) {
  StepResult result;
  try {
    if (request.window_bn)
      request.window_bn->begin(assembler, request.order, request.window);
    result.completed = run_micro_steps(engine, assembler, request.order, request.window,
                                       request.first_micro_step, request.after_micro_step);
  } catch (const c10::OutOfMemoryError&) {
    if (request.window_bn)
      request.window_bn->end(/*applied=*/false);
    engine.discard();
    throw;
  }
  if (!result.completed)
    return result;
  if (request.stop_requested && request.stop_requested())
    engine.request_stop();
  // The rate comes from the averages that now include this update's gradients (AdaScale).
  // The noise sample is made of reduced values only, so every rank computes the same rate.
  result.stats = engine.update([&](const UpdateStats& stats) {
    if (request.noise)
      feed_noise_scale(*request.noise, stats);
    result.rate = request.rate ? request.rate(stats) : UpdateRate{};
    return result.rate.lr;
  });
  if (request.window_bn)
    request.window_bn->end(/*applied=*/!result.stats.non_finite);
  return result;
}

UpdateStats train_window(AccumulationEngine& engine, BatchAssembler& assembler,
                         const std::vector<int64_t>& order, const UpdateWindow& window, double lr) {
  StepRequest request{order, window};
  request.rate = [lr](const UpdateStats&) { return UpdateRate{lr}; };
  return train_step(engine, assembler, request).stats;
}

}  // namespace bigbatch
