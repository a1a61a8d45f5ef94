#pragma once
// --checkpoint-every for the fit loop (train/fit_loop.h): when the next checkpoint is due, by
// updates, seconds or micro-steps, and writing one at an update boundary or inside a window
// (checkpoint/checkpoint.h holds the format). Rank 0 writes; every rank keeps the cadence.
//
//   Checkpointer checkpoints(run);
//   if (checkpoints.due()) checkpoints.write();
#include <cstdint>

#include "core/clock.h"
#include "schedule/interval.h"
#include "train/training_run.h"

namespace bigbatch {

class Checkpointer {
 public:
  explicit Checkpointer(TrainingRun& run);
  bool due() const;  // at an update boundary, by updates or seconds since the last one
  bool due_inside_window() const;  // by micro-steps (--checkpoint-every Nmicro)
  void note_micro_step() { ++micro_steps_since_; }
  void write();                // at an update boundary
  void write_inside_window();  // run.state.at.micro_step micro-steps into the next update
  int64_t last_step() const { return last_step_; }
  bool has_cadence() const { return cadence_.is_set(); }
  // The step of the newest checkpoint (written by this process, or the one it resumed from)
  // when it was written outside a streak of skipped updates; -1 when there is none, or the
  // newest was written inside one (a signal or the run's end can stop a run there).
  int64_t last_clean_step() const { return last_clean_step_; }

 private:
  void flush_metrics();
  void note_written();
  TrainingRun& run_;
  Cadence cadence_;
  int64_t cadence_updates_ = 0;
  int64_t last_step_ = 0;
  SteadyClock::time_point last_time_;
  int64_t micro_steps_since_ = 0;
  int64_t last_clean_step_ = -1;
};

}  // namespace bigbatch
