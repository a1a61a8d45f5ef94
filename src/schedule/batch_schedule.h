#pragma once
// Batch-size ramp-up (Smith, Kindermans, Ying, Le 2018: "Don't decay the learning rate,
// increase the batch size"): the global batch grows at thresholds counted in samples or epochs,
//   --global-batch-schedule "0:256 200000s:1024 1e6s:4096"
// The micro-batch stays; accumulation steps grow with the batch, so memory stays flat. A
// threshold takes effect at the first update that starts at or past it (an update's samples are
// never split between two batch sizes). Thresholds in updates are refused: an update's size is
// what changes.
//
//   GlobalBatchSchedule ramp = GlobalBatchSchedule::parse("0:256 2e:1024");
//   int64_t global = ramp.global_batch_at({samples_seen, epoch, position_in_epoch}, 60000);
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "batching/batch_plan.h"
#include "schedule/interval.h"

namespace bigbatch {

// Where training stands at an update boundary, as the schedule reads it.
struct TrainingPosition {
  int64_t samples_seen = 0;
  int64_t epoch = 0;              // 0-based
  int64_t position_in_epoch = 0;  // samples of this epoch's order already used
};

class GlobalBatchSchedule {
 public:
  struct Step {
    Interval at;  // samples or epochs; the first step is at 0
    int64_t global_batch = 0;
  };

  // "0:256 200000s:1024 1e6s:4096" (spaces or commas between steps). Throws bigbatch::Error
  // (Config) naming the step and the accepted form.
  static GlobalBatchSchedule parse(const std::string& text);
  bool empty() const { return steps_.empty(); }
  const std::vector<Step>& steps() const { return steps_; }
  std::string to_string() const;

  // The global batch for an update that starts at `position`. Epoch thresholds count whole
  // and fractional epochs of the order (epoch + position / dataset_size), so "2e" is exactly
  // the start of the third epoch whatever --last-window drops.
  int64_t global_batch_at(const TrainingPosition& position, int64_t dataset_size) const;

 private:
  std::vector<Step> steps_;
};

// One stretch of training at one global batch, for the plan and the run's length.
struct RampPhase {
  int64_t global_batch = 0;
  int64_t accumulation_steps = 0;
  int64_t first_update = 0;  // 0-based index of its first update in the run
  int64_t updates = 0;
  int64_t samples = 0;
  int64_t short_windows = 0;  // epoch-end updates with fewer samples than the global batch
};

// Walks `epochs` epochs (at most `max_updates` updates) update by update — cheap: no data —
// cutting each window with the plan that `plan_for(global_batch)` returns, and groups
// consecutive updates of one batch size.
std::vector<RampPhase> simulate_ramp(const GlobalBatchSchedule& schedule,
                                     const std::function<BatchPlan(int64_t)>& plan_for,
                                     int64_t dataset_size, LastWindow last_window, int64_t epochs,
                                     int64_t max_updates);

}  // namespace bigbatch
