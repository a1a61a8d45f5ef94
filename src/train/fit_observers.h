#pragma once
// What the fit loop tells after each update, each epoch and each event, and who listens:
// metrics.jsonl (MetricsLog) and the terminal (ProgressDisplay), told in order by FitObservers.
// Observers only report; what decides (evaluation, stopping, checkpoints) stays in the loop,
// which tells them after it has advanced the progress counters.
//
//   FitObservers observers(console);
//   observers.update(run, report);
//   observers.hold();                      // a branch test's branch: told only if it is kept
//   FitObservers::Held branch = observers.release();
//   observers.tell(run, branch);
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "report/run_events.h"
#include "train/train_step.h"
#include "train/training_run.h"

namespace bigbatch {

// One finished update, told after the progress has counted it. `at` is the progress right
// after it: run.state.at, or, for the updates of a branch test told once the test is decided, the
// kept branch's progress at that update.
struct UpdateReport {
  const StepResult& step;
  const TrainingProgress& at;
  double seconds = 0;           // the update's own time
  double wall_seconds = 0;      // since training began, everything included
  int64_t allreduce_calls = 0;  // collectives it issued
  int64_t peak_bytes = 0;       // tensor memory peak during it
  int64_t skipped_updates = 0;  // skipped (non-finite) updates so far in this process
  std::optional<double> noise_scale;
};

// One epoch's record (or the record of the part of one where the run ends), with its
// evaluation, or an interval's evaluation (--eval-every; "event": "evaluation"): the line
// metrics.jsonl gets.
struct EpochReport {
  const nlohmann::json& record;
};

class FitObserver {
 public:
  virtual ~FitObserver() = default;
  virtual void on_update(const TrainingRun& run, const UpdateReport& update) = 0;
  virtual void on_epoch(const TrainingRun& run, const EpochReport& epoch) = 0;
  virtual void on_evaluation(const TrainingRun& run, const EpochReport& evaluation) = 0;
  // Anything else the loop did (report/run_events.h): a skipped update, a batch switch, a
  // back-off, a target reached, divergence.
  virtual void on_event(const TrainingRun& run, const RunEvent& event) = 0;
};

// metrics.jsonl: a record per update, the epoch records (flushed at once: the epoch's numbers
// are what a reader waits for). Rank 0 only.
class MetricsLog final : public FitObserver {
 public:
  void on_update(const TrainingRun& run, const UpdateReport& update) override;
  void on_epoch(const TrainingRun& run, const EpochReport& epoch) override;
  void on_evaluation(const TrainingRun& run, const EpochReport& evaluation) override;
  void on_event(const TrainingRun& run, const RunEvent& event) override;
};

// The progress bar or lines, and a summary line per epoch.
class ProgressDisplay final : public FitObserver {
 public:
  explicit ProgressDisplay(Console& console) : console_(console) {}
  void on_update(const TrainingRun& run, const UpdateReport& update) override;
  void on_epoch(const TrainingRun& run, const EpochReport& epoch) override;
  void on_evaluation(const TrainingRun& run, const EpochReport& evaluation) override;
  void on_event(const TrainingRun& run, const RunEvent& event) override;

 private:
  Console& console_;
};

// The loop's observers (metrics.jsonl, then the terminal), told in order. While a branch test
// trains a branch, updates and events are held instead, with the progress they were told at,
// and told once the test keeps that branch; a run with the test writes what a run without it
// would have. (No epoch ends and nothing is evaluated inside a branch.)
class FitObservers {
 public:
  explicit FitObservers(Console& console);
  void update(const TrainingRun& run, const UpdateReport& report);
  void event(const TrainingRun& run, const RunEvent& event);
  void epoch(const TrainingRun& run, const EpochReport& epoch);
  void evaluation(const TrainingRun& run, const EpochReport& evaluation);

  // An update or an event, held with what its report refers to.
  struct HeldRecord {
    std::optional<RunEvent> event;
    std::optional<StepResult> step;
    TrainingProgress at;
    double seconds = 0;
    double wall_seconds = 0;
    int64_t allreduce_calls = 0;
    int64_t peak_bytes = 0;
    int64_t skipped_updates = 0;
    std::optional<double> noise_scale;
  };
  using Held = std::vector<HeldRecord>;
  // Holds every update and event from here until release(), which returns them in order.
  void hold();
  Held release();
  // Tells what was held, as it would have been told then.
  void tell(const TrainingRun& run, const Held& held);

 private:
  std::vector<std::unique_ptr<FitObserver>> observers_;
  std::optional<Held> held_;
};

}  // namespace bigbatch
