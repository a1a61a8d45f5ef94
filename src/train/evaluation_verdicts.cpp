#include "train/evaluation_verdicts.h"

#include <cmath>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

std::optional<std::string> EvaluationVerdicts::stopped_before_resume(const TrainingRun& run) {
  const TrainingProgress& at = run.state.at;
  if (!run.config.early_stop_metric() || at.early_stop.since_best < run.config.patience)
    return std::nullopt;
  early_stopped_ = true;
  return "--early-stop: the run stopped early at update " + std::to_string(at.step) +
         " (no improvement in " + count_of(at.early_stop.since_best, "evaluation") +
         "); resume with a larger --patience to train on";
}

// On the validation split when there is one, unless the target names its split; the test set
// is not for decisions. Its metric was checked against the data before training
// (train/run_setup.h), so the record holds it.
std::optional<RunEvent> EvaluationVerdicts::check_target(const TrainingRun& run,
                                                         const nlohmann::json& record) {
  const std::optional<StopTarget> target = run.config.stop_target();
  if (!target || target_reached_)  // reached at an interval, the run's end records its epoch
    return std::nullopt;
  const std::string metric = target->metric_in(run.data.validation.size() > 0);
  const auto found = record.find(metric);
  BB_INTERNAL_ASSERT(found != record.end(), "the epoch record has no " + metric);
  const double value = found->get<double>();
  if (!target->reached(value))
    return std::nullopt;
  target_reached_ = true;
  // Epochs done where it was reached: a fraction at an interval's evaluation (--eval-every) or
  // where a run ends inside an epoch, a whole number at an epoch's end.
  const double epochs = record.contains("partial_epoch")
                            ? double(run.state.at.epoch) + record["partial_epoch"].get<double>()
                            : record["epoch"].get<double>();
  return target_reached_event(run.state.at, *target, metric, value, epochs);
}

// --keep-best: the weights of each evaluation that beats the best so far replace
// RUN/best.safetensors. --early-stop: after `patience` evaluations in a row without an
// improvement larger than --min-delta, the run ends here.
std::vector<RunEvent> EvaluationVerdicts::judge(TrainingRun& run, const nlohmann::json& record) {
  std::vector<RunEvent> events;
  if (auto reached = check_target(run, record))
    events.push_back(std::move(*reached));
  TrainingProgress& at = run.state.at;
  const bool has_validation = run.data.validation.size() > 0;
  const auto value_of = [&](const WatchedMetric& watched) {
    const std::string key = watched.metric_in(has_validation);
    const auto found = record.find(key);
    BB_INTERNAL_ASSERT(found != record.end(), "the evaluation record has no " + key);
    // A figure that is not finite is written as null: it never improves.
    return found->is_number() ? found->get<double>() : std::nan("");
  };
  if (const auto watched = run.config.keep_best_metric()) {
    const std::string key = watched->metric_in(has_validation);
    const double value = value_of(*watched);
    at.keep_best.metric = key;
    if (at.keep_best.observe(value, at.step, watched->rises(), /*min_delta=*/0)) {
      run.save_model_weights(run.run_dir + "/best.safetensors", at.step,
                             {{"best_metric", key}, {"best_value", format_double(value)}});
      events.push_back(best_weights_event(at, key, value));
    }
  }
  if (const auto watched = run.config.early_stop_metric()) {
    const std::string key = watched->metric_in(has_validation);
    at.early_stop.metric = key;
    at.early_stop.observe(value_of(*watched), at.step, watched->rises(), run.config.min_delta);
    if (at.early_stop.since_best >= run.config.patience && !early_stopped_) {
      early_stopped_ = true;
      events.push_back(early_stop_event(at, key, run.config.patience, run.config.min_delta));
    }
  }
  return events;
}

void EvaluationVerdicts::share(TrainingRun& run) {
  if ((run.config.stop_target() || run.config.early_stop_metric()) && run.job.world_size > 1) {
    std::vector<torch::Tensor> verdict = {
        torch::tensor({target_reached_ ? 1 : 0, early_stopped_ ? 1 : 0})};
    run.reducer->broadcast_from_first_rank(verdict);
    target_reached_ = verdict[0][0].item<int64_t>() != 0;
    early_stopped_ = verdict[0][1].item<int64_t>() != 0;
  }
}

}  // namespace bigbatch
