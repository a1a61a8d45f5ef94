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
};

struct SweepGrid {
  std::vector<int64_t> global_batches;
  std::vector<std::string> lr_scalings;
  std::vector<std::string> warmups;
  std::vector<SweepCell> cells() const;  // batch-major: the small batches run first
};

}  // namespace bigbatch
