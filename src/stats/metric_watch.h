#pragma once
// The best value an evaluated figure has reached and the evaluations since: what
// --early-stop's patience counts and what --keep-best's file holds. Part of the checkpointed
// progress, so a resumed run keeps counting. Torch-free.
//
//   MetricWatch watch{"val_loss"};
//   watch.observe(0.52, /*step=*/100, /*rises=*/false, /*min_delta=*/0);  // true: the first
//   watch.observe(0.53, 200, false, 0);   // false; watch.since_best == 1
#include <cstdint>
#include <string>

namespace bigbatch {

struct MetricWatch {
  std::string metric;         // the record's key it watches ("val_loss"); empty: none yet
  bool seen = false;          // a finite value was counted
  double best = 0;            // the best value so far
  int64_t best_step = 0;      // the update it was reached at
  int64_t since_best = 0;     // evaluations since (all of them while none was finite)
  int64_t counted_step = -1;  // the update of the last evaluation counted

  // Counts an evaluation's `value` at update `step`: true, and the new best, when it improves on
  // the best by more than `min_delta` (up when `rises`, else down; the first finite value
  // always does). A value that is not finite never improves. A step already counted (a run's
  // end records the evaluation an interval just made) is not counted again.
  bool observe(double value, int64_t step, bool rises, double min_delta);
};

}  // namespace bigbatch
