#pragma once
// The largest (and the fastest) micro-batch that fits a memory budget, measured rather than
// guessed: each probe builds the model and optimizer afresh and runs real training micro-steps
// through the AccumulationEngine — forward, backward, and an optimizer step so that its state
// exists — under the tracking allocator with the budget enforced (memory/tracking_allocator.h).
// Sizes double from 1 until one does not fit, then a binary search narrows the boundary.
// Token rows are probed longest first: a micro-batch costs rows x its longest row, so the
// probe of each size is the worst micro-batch of that size any window can hold.
//
// A size fits when no allocation was refused and its peak stays under budget x (1 - margin):
// the margin covers what a probe does not see (evaluation, fragmentation, a later larger
// sample). `bigbatch fit` prints the table; `--micro-batch auto` trains at the fastest fitting
// size, since accumulation makes every micro-batch compute the same update.
//
// Speed is timed in rounds: after the search every fitting size is timed again, the sizes
// taking turns, so a busy moment of the machine falls on one round of one size rather than on
// all of a size's timing. A size's speed is the median of its rounds, shown with their spread;
// sizes within the fastest's spread (at least 3%) count as equally fast, and the largest of
// them is named (fewer micro-steps per update).
//
//   FitOptions options;
//   options.budget_bytes = 512 << 20;  options.margin = 0.1;  options.max_micro_batch = 4096;
//   FitResult fit = fit_micro_batch(make, settings, data.train, options);
//   fit.max_micro_batch;  // 0: not even one sample fits
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "optim/optimizer.h"

namespace bigbatch {

struct FitOptions {
  int64_t budget_bytes = 0;
  double margin = 0.1;
  int64_t max_micro_batch = 0;     // the largest size worth probing (per-rank batch, dataset)
  bool measure_speed = true;       // time micro-steps of every fitting size
  double seconds_per_probe = 0.2;  // timing per size and round (at least 2 micro-steps)
  int timing_rounds = 3;           // rounds of timing per fitting size
  // Where the probes run: their models and batches go there, and memory is that device's.
  torch::Device device{torch::kCPU};
  // Called after each probe (progress for a long search).
  std::function<void(int64_t micro_batch, bool fits)> on_probe;
};

struct FitProbe {
  int64_t micro_batch = 0;
  bool fits = false;
  int64_t peak_bytes = 0;      // tracked peak of the probe; 0 when it ran out of memory
  double samples_per_s = 0;    // the median of the rounds; 0 when not measured
  std::vector<double> rounds;  // samples/s of each round of timing

  // (slowest - fastest) / median of the rounds: how far the machine's noise moved this size.
  double spread() const;
};

struct FitResult {
  int64_t budget_bytes = 0;
  int64_t usable_bytes = 0;         // budget x (1 - margin)
  int64_t max_micro_batch = 0;      // largest fitting size (0: none)
  int64_t fastest_micro_batch = 0;  // fitting size with the most samples/s (0: not measured)
  // The other fitting sizes within the timing noise of the fastest (smallest first).
  std::vector<int64_t> as_fast;
  std::vector<FitProbe> table;  // every probe, by size
  // Token rows: the target tokens of the longest row, which every probe is padded to (probes
  // take the longest rows first: the worst micro-batch a window can hold); 0 for samples.
  int64_t probe_row_tokens = 0;

  // The probe of `micro_batch`, or nullptr when it was not probed.
  const FitProbe* row(int64_t micro_batch) const;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

using ModelFactory = std::function<torch::nn::Sequential()>;

FitResult fit_micro_batch(const ModelFactory& make_model, const OptimizerSettings& optimizer,
                          const TensorDataset& data, const FitOptions& options);

}  // namespace bigbatch
