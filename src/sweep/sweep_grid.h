#pragma once
// `bigbatch sweep`: the seed's good practice, automated — grow the effective batch while
// scaling the learning rate, and watch validation accuracy, counting progress in updates.
// This file is the grid: lists of global batches, LR scaling rules and warmups, and the cells
// of their product, each one an ordinary `bigbatch train` run in its own directory.
//
//   SweepGrid grid;
//   grid.global_batches = parse_batch_list("32,64,...,4096");  // 32 64 128 ... 4096
//   grid.lr_scalings = {"none", "linear", "sqrt"};
//   grid.warmups = {"0u", "2e"};
//   for (const SweepCell& cell : grid.cells()) ...  // 24 cells
#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

// "32,64,128" or a geometric run "32,64,...,4096" (the first two set the ratio; the run stops
// at the last value, which must be on it). Throws bigbatch::Error (Config) naming the problem.
std::vector<int64_t> parse_batch_list(const std::string& text);

// "none,linear,sqrt" -> its items, each checked by `check` (which throws on a bad one).
std::vector<std::string> parse_word_list(const std::string& text, const std::string& flag,
                                         void (*check)(const std::string&));

struct SweepCell {
  int64_t global_batch = 0;
  std::string lr_scaling;
  std::string warmup;
  // "gb000256-linear-w2e": sortable, and safe as a directory name.
  std::string name() const;
  // The rule and warmup, the series a chart groups cells by: "linear, warmup 2e".
  std::string series() const;
  // The cell's micro-batch: `micro_batch`, at most the global batch. AdaScale measures its gain
  // from two batch sizes per update, so its cells keep at least two micro-steps (a cell of
  // global batch 1 has no smaller batch and is left to train's own error).
  int64_t micro_batch(int64_t micro_batch) const;
  // The cell whose run this one shares (empty: its own). At the batch the rate is tuned at,
  // every rule but AdaScale trains at the base rate itself: those cells would be one run twice.
  std::string same_as{};
  // The directory its run is in: its own name, or the shared cell's.
  std::string run_name() const { return same_as.empty() ? name() : same_as; }
};

struct SweepGrid {
  std::vector<int64_t> global_batches;
  std::vector<std::string> lr_scalings;
  std::vector<std::string> warmups;
  int64_t reference_batch = 0;  // the batch the base rate is tuned at (0: not known)
  // Batch-major: the small batches run first. At the reference batch, a cell of a rule other
  // than adascale shares the run of the first such cell of its warmup (SweepCell::same_as).
  std::vector<SweepCell> cells() const;
};

}  // namespace bigbatch
