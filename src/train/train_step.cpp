#include "train/train_step.h"

#include <algorithm>

#include "batching/token_packing.h"
#include "core/clock.h"
#include "stats/loss_spikes.h"

namespace bigbatch {

namespace {

// Positions a plain cut of token rows computes: each micro-batch padded to its longest row.
int64_t padded_tokens(const int64_t* rows, const std::vector<int64_t>& micro_batch_sizes,
                      const TensorDataset& data) {
  int64_t total = 0;
  for (const int64_t size : micro_batch_sizes) {
    int64_t longest = 1;
    for (int64_t i = 0; i < size; ++i)
      longest = std::max(longest, data.lengths[size_t(rows[i])]);
    total += size * longest;
    rows += size;
  }
  return total;
}

}  // namespace

void feed_noise_scale(NoiseScaleTracker& noise, const UpdateStats& stats, int64_t global_batch) {
  const double items = double(stats.counts.items);
  if (stats.skipped() || stats.small_batch <= 0 || stats.small_batch >= items)
    return;
  noise.add({stats.small_batch, stats.small_batch_sq_norm, items, stats.big_batch_sq_norm},
            double(global_batch));
}

StepResult train_step(AccumulationEngine& engine, BatchAssembler& assembler,
                      const StepRequest& request) {
  StepResult result;
  // Under a token budget the window's micro-batches are cut anew: the same samples, another
  // packing, the same update.
  const TensorDataset& data = assembler.dataset();
  const bool packed = request.micro_batch_tokens > 0 && data.is_tokens();
  UpdateWindow window = request.window;
  TokenPacking packing;
  if (packed) {
    packing = pack_by_tokens(request.order.data() + window.rank_begin, window.rank_size,
                             data.lengths, request.micro_batch_tokens);
    window.micro_batch_sizes = packing.micro_batch_sizes;
    result.padded_tokens = packing.padded_tokens;
  } else if (data.is_tokens()) {
    result.padded_tokens =
        padded_tokens(request.order.data() + window.rank_begin, window.micro_batch_sizes, data);
  }
  const auto start = SteadyClock::now();
  try {
    if (request.window_bn)
      request.window_bn->begin(assembler, request.order, window);
    result.completed =
        run_micro_steps(engine, assembler, request.order, window, request.first_micro_step,
                        request.after_micro_step, packed ? &packing.rows : nullptr);
  } catch (const c10::OutOfMemoryError&) {
    if (request.window_bn)
      request.window_bn->end(/*applied=*/false);
    engine.discard();
    throw;
  }
  if (!result.completed)
    return result;
  if (request.synchronize)
    request.synchronize();
  result.gradient_seconds = seconds_since(start);
  if (request.stop_requested && request.stop_requested())
    engine.request_stop();
  // Every value below is reduced over the ranks, so every rank judges and rates alike.
  UpdateStats& stats = result.stats;
  stats = engine.finish_gradients();
  stats.loss_spike = !stats.non_finite && request.recent_losses &&
                     is_loss_spike(*request.recent_losses, stats.loss(), request.spike_factor);
  // The rate comes from the averages that now include this update's gradients (AdaScale); a
  // skipped update's is asked for too, and logged.
  if (request.noise) {
    feed_noise_scale(*request.noise, stats,
                     request.schedule ? request.schedule->plan().global_batch_size : 0);
  }
  result.rate = request.schedule
                    ? request.schedule->rate(*request.at, {stats.counts.items, request.noise})
                    : UpdateRate{request.lr};
  if (request.on_final_gradients)
    request.on_final_gradients();
  if (stats.skipped()) {
    engine.discard();
  } else {
    engine.apply(result.rate.lr, result.rate.adam);
  }
  if (request.window_bn)
    request.window_bn->end(/*applied=*/!result.stats.skipped());
  return result;
}

UpdateStats train_window(AccumulationEngine& engine, BatchAssembler& assembler,
                         const std::vector<int64_t>& order, const UpdateWindow& window, double lr) {
  StepRequest request{order, window};
  request.lr = lr;
  return train_step(engine, assembler, request).stats;
}

}  // namespace bigbatch
