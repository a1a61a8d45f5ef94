#pragma once
// The fit level of `bigbatch train`: epochs of updates until the run is complete, its target
// is reached or a signal stops it, on a TrainingRun set up by set_up_training. Each update is
// one train_step (train/train_step.h); around it the loop follows the batch schedule, backs
// off on out-of-memory, counts the update into run.state.at, tells its observers (metrics,
// progress), guards against divergence, evaluates on --eval-every's interval and checkpoints on
// the cadence; at each epoch's end it evaluates, records and checks the target.
//
//   FitLoop loop(run, console);
//   loop.run();                       // throws Interrupted / Error(Diverged) where it stops
//   double accuracy = loop.last_test().accuracy;
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/clock.h"
#include "report/run_events.h"
#include "runtime/interrupts.h"
#include "schedule/interval.h"
#include "stats/gradient_noise.h"
#include "train/checkpointer.h"
#include "train/evaluate.h"
#include "train/evaluation_verdicts.h"
#include "train/fit_observers.h"
#include "train/train_step.h"
#include "train/training_run.h"

namespace bigbatch {

class FitLoop {
 public:
  FitLoop(TrainingRun& run, Console& console);
  // Trains to the end of the run, writing metrics, progress and checkpoints on the way.
  void run();
  const EvalResult& last_test() const { return held_out_.last_test(); }
  const EvalResult& last_validation() const { return held_out_.last_validation(); }

 private:
  // One update of the epoch whose sample order is `order` — or, when the schedule has a
  // proposal waiting, its branch test — with what follows it (records, evaluation, the
  // schedule's check, a checkpoint); returns whether a stop was asked for (on any rank).
  bool run_update(const std::vector<int64_t>& order);
  // An update trained and counted into state_.at, for its report.
  struct TrainedUpdate {
    StepResult step;
    int64_t rank_samples = 0;  // this rank's samples in the window
    bool whole_window = true;  // all its micro-steps ran in this process
    SteadyClock::time_point start;
    double seconds = 0;
    int64_t allreduce_calls = 0;
    int64_t peak_bytes = 0;
  };
  // One update at the plan in force, counted. None when it was not: backed off on
  // out-of-memory (the same update comes again, cut smaller), or stopped inside a branch test
  // (branch_stopped_).
  std::optional<TrainedUpdate> train_update(const std::vector<int64_t>& order);
  // Tells the observers (which hold it while a branch test trains a branch).
  void report_update(const TrainedUpdate& update);
  // The schedule's proposal tested by branching (train/branch_trial.h); the kept branch's
  // records are told once it is decided. Returns whether a stop was asked for.
  bool test_proposal(const std::vector<int64_t>& order, const BatchDecision& proposal);
  // The checkpoint after an update (on the cadence, or for a stop); returns `stop`.
  bool after_update(bool stop);
  StepRequest step_request(const std::vector<int64_t>& order, const UpdateWindow& window);
  // Advances state_.at by a finished update.
  void count_update(const UpdateWindow& window, const StepResult& step, double seconds);
  void check_divergence();
  void back_off(const c10::OutOfMemoryError& oom);
  void announce_batch_change(const BatchChange& change);
  // The launch command a resume of this job goes under; empty for one process.
  std::string relaunch_command() const;
  // Tells the observers (metrics.jsonl, the terminal) of an event.
  void tell(const RunEvent& event) { observers_.event(run_, event); }
  // The epoch's record with its evaluation; ends_inside: the run ends inside the epoch.
  void record_epoch(bool ends_inside);
  // --eval-every: whether this update ends an interval (and no epoch end evaluates it anyway),
  // and the evaluation there, with its record and the target's check.
  bool evaluation_due(int64_t samples_before) const;
  void evaluate_on_interval();
  // The held-out splits' figures at the current step (rank 0), evaluated once per step.
  nlohmann::json evaluate_splits();
  void evaluate_into(nlohmann::json& record, bool interval);
  bool ends_early() const { return verdicts_.end_run(); }
  void start_next_epoch();
  void finish();

  bool epoch_used_up() const;
  [[noreturn]] void stop_after_update() const;

  TrainingRun& run_;
  RunState& state_;  // run_.state: the part of the run the loop changes
  Console& console_;
  // While a branch test trains a branch (its records held by the observers): whether a stop
  // was asked for inside it.
  bool in_branch_ = false;
  bool branch_stopped_ = false;
  Checkpointer checkpoints_;
  FitObservers observers_;
  NoiseScaleTracker noise_;
  InterruptGuard interrupts_;
  // The batch buffer belongs to the micro-steps' memory: it is allocated inside the window
  // that the out-of-memory back-off protects, and rebuilt smaller after a back-off.
  std::unique_ptr<BatchAssembler> assembler_;
  SteadyClock::time_point train_start_;
  int64_t epoch_peak_bytes_ = 0;
  HeldOutEvaluation held_out_;
  EvaluationVerdicts verdicts_;
};

}  // namespace bigbatch
