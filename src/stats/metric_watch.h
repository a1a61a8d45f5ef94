#pragma once
// The best value an evaluated figure has reached and the evaluations since: what
// --early-stop's patience counts and what --keep-best's file holds. Part of the checkpointed
// progress, so a resumed run keeps counting. Torch-free.
//
//   MetricWatch watch;
//   watch.observe(0.52, /*step=*/100, /*rises=*/false, /*min_delta=*/0);  // true: the first
//   watch.observe(0.53, 200, false, 0);   // false; watch.since_best == 1
#include <cstdint>

namespace bigbatch {

struct MetricWatch {
  bool seen = false;       // an evaluation was counted
  double best = 0;         // the best value so far
  int64_t best_step = 0;   // the update it was reached at
  int64_t since_best = 0;  // evaluations since, that did not improve on it

  // Counts an evaluation's `value` at update `step`: true, and the new best, when it improves on
  // the best by more than `min_delta` (up when `rises`, else down; the first evaluation always
  // does). A value that is not finite never improves.
  bool observe(double value, int64_t step, bool rises, double min_delta);
};

}  // namespace bigbatch
