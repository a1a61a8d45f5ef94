#pragma once
// What the held-out evaluations decide: --target (or --target-accuracy) reached, --keep-best's
// weights replaced, --early-stop's patience spent. Only rank 0 evaluates and judges; share()
// gives every rank its verdict, so that the ranks stop together.
//
//   EvaluationVerdicts verdicts;
//   for (const RunEvent& event : verdicts.judge(run, record)) tell(event);
//   verdicts.share(run);
//   if (verdicts.end_run()) ...
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_events.h"
#include "train/training_run.h"

namespace bigbatch {

class EvaluationVerdicts {
 public:
  // A run that stopped early and is resumed with the same patience stays stopped (a larger
  // --patience lets it go on): the line that says so, when it does.
  std::optional<std::string> stopped_before_resume(const TrainingRun& run);
  // An epoch's or an interval's record, with its held-out figures, judged: the events it
  // caused, in order (the best weights are written to RUN/best.safetensors here).
  std::vector<RunEvent> judge(TrainingRun& run, const nlohmann::json& record);
  // Rank 0's verdicts on every rank.
  void share(TrainingRun& run);
  bool end_run() const { return target_reached_ || early_stopped_; }

 private:
  std::optional<RunEvent> check_target(const TrainingRun& run, const nlohmann::json& record);
  bool target_reached_ = false;  // at an epoch's end or an interval's evaluation
  bool early_stopped_ = false;   // --early-stop's patience ran out
};

}  // namespace bigbatch
