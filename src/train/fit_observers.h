#pragma once
// What the fit loop tells after each update, each epoch and each event, and who listens:
// metrics.jsonl (MetricsLog) and the terminal (ProgressDisplay). Observers only report; what
// decides (evaluation, stopping, checkpoints) stays in the loop, which calls them in order after it
// has advanced the progress counters.
//
//   std::vector<std::unique_ptr<FitObserver>> observers;
//   observers.push_back(std::make_unique<MetricsLog>());
//   for (auto& o : observers) o->on_update(run, update);
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "report/run_events.h"
#include "train/train_step.h"
#include "train/training_run.h"

namespace bigbatch {

// One finished update, told after the progress has counted it. `at` is the progress right
// after it: run.at, or, for the updates of a branch test told once the test is decided, the
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

}  // namespace bigbatch
