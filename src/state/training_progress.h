#pragma once
// Where a run stands: the fit loop's counters (TrainingProgress, saved in every checkpoint and
// printed on resume) and the accumulation engine's account of an open window (WindowState,
// saved by a checkpoint taken inside one). Torch-free, below both the trainer that advances
// them and the checkpoints that store them.
//
//   TrainingProgress at;
//   at.samples_seen += update.counts.samples;  // what the plan cut
//   at.items_seen += update.counts.items;      // what the mean was taken over
#include <cstdint>
#include <vector>

#include "state/batch_growth_state.h"
#include "state/counts.h"
#include "stats/gradient_noise.h"
#include "stats/metric_watch.h"

namespace bigbatch {

// Where the fit loop stands: enough to continue exactly. Saved at update boundaries (and, with
// a WindowState, inside a window).
struct TrainingProgress {
  int64_t step = 0;             // updates done
  int64_t epoch = 0;            // the epoch the next update belongs to (0-based)
  int64_t update_in_epoch = 0;  // the next update's index within that epoch
  // Samples of the epoch's order already used: where the next window starts. Equal to
  // update_in_epoch x global batch unless the batch changed inside the epoch (a ramp); -1 in a
  // checkpoint from before it was saved (the trainer then derives it).
  int64_t position_in_epoch = 0;
  // The global batch of the last update done (0: none yet): a batch ramp resumes under it, so
  // a step reached at the next update is switched to, and announced, exactly once.
  int64_t global_batch = 0;
  // Consumed by the updates so far, skipped ones included (their samples were used up): the
  // samples the plan cut, and the items the means were taken over.
  int64_t samples_seen = 0;
  int64_t items_seen = 0;
  double train_seconds = 0;
  // The current epoch's applied updates, for its train_loss / train_accuracy record (an update
  // skipped as non-finite taught nothing and is not in them).
  Counts epoch_counts;
  // Micro-steps of the next update already done (0 at an update boundary). A checkpoint taken
  // inside a window also holds that window's accumulated gradients and WindowState.
  int64_t micro_step = 0;
  // The gradient noise scale's running averages, so a resumed run continues the same estimate.
  NoiseScaleState noise;
  // AdaScale's scale-invariant updates so far (tau; 0 under the other rules).
  double scale_invariant_step = 0;
  // metrics.jsonl's length when the checkpoint was written (its lines are flushed first): a
  // resumed run cuts the file back to exactly this, dropping every line the interrupted process
  // wrote after it, events included. -1 in checkpoints from before it was saved (resume then
  // drops the lines of later steps).
  int64_t metrics_bytes = -1;
  // The step at which the last epoch record (with its evaluation) was written, so a resumed run
  // with nothing left to train does not evaluate and record the same point twice.
  int64_t recorded_epoch_step = -1;
  // Out-of-memory back-offs so far in the run.
  int64_t oom_backoffs = 0;
  // The losses of the last applied updates, oldest first (stats/loss_spikes.h), and the
  // updates skipped as non-finite or as loss spikes: in all, and in a row up to now.
  std::vector<double> recent_losses;
  int64_t skipped_updates = 0;
  int64_t bad_in_a_row = 0;
  // --global-batch auto: the update cost measured and the doublings decided so far.
  BatchGrowthState growth;
  // --early-stop's metric and --keep-best's: their best so far and the evaluations since.
  MetricWatch early_stop;
  MetricWatch keep_best;
};

// What an open window has accumulated on this rank besides the gradients in .grad: enough to
// continue it exactly after a restart.
struct WindowState {
  int64_t micro_steps = 0;
  Counts counts;  // this rank's micro-steps so far
  // The first micro-step's gradient measurement (the noise scale's small batch), if taken.
  int64_t first_items = 0;
  double first_sq_norm = 0;
};

}  // namespace bigbatch
