#include "report/run_start.h"

#include "core/text.h"
#include "report/plan_report.h"
#include "schedule/batch_growth.h"

namespace bigbatch {

namespace {

// A batch that moves (a ramp, the automatic batch): the rate at its reference batch, the rule
// that carries it to each batch, and the schedule counted in samples.
std::string rate_with_the_batch(const TrainConfig& config, const ResolvedRun& run) {
  const LrScheduleConfig& schedule = run.schedule.config();
  const std::string reference = std::to_string(run.ramp->reference_batch);
  return "lr " + format_double(config.base_lr()) + " @ " + reference + ", " +
         to_string(schedule.scaling) + " with the batch; warmup and " + to_string(schedule.kind) +
         " schedule counted in samples (" + std::to_string(schedule.warmup_updates) + " and " +
         std::to_string(schedule.total_updates) + " updates of " + reference + ")";
}

}  // namespace

std::vector<std::string> run_start_lines(const RunStart& start) {
  std::vector<std::string> lines;
  const ResolvedRun& run = start.run;
  const TrainConfig& config = start.config;
  const int64_t world_size = start.world_size;
  lines.push_back(
      "bigbatch: " + config.model + " on " + config.dataset + " (" +
      std::to_string(start.train_samples) + " train, " + std::to_string(start.validation_samples) +
      " validation, " + std::to_string(start.test_samples) + " test samples" +
      (start.controller_samples > 0
           ? ", " + std::to_string(start.controller_samples) + " set aside for the growth tests"
           : "") +
      "), " +
      (world_size > 1 ? std::to_string(world_size) + " ranks (" + start.ranks_source + "), " : "") +
      "device " + start.device + (world_size > 1 ? " on rank 0" : "") + ", " + start.cpu);
  if (!start.data_description.empty())
    lines.push_back("data: " + start.data_description);
  for (const std::string& warning : start.class_warnings)
    lines.push_back("warning: " + warning);
  for (const std::string& warning : start.data_warnings)
    lines.push_back("warning: " + warning);
  if (run.micro_batch_tokens > 0) {
    lines.push_back("batch plan: " + describe_token_cut(run) +
                    (world_size > 1 ? " on rank 0" : "") + "; " +
                    std::to_string(run.epoch.updates_per_epoch) + " updates per epoch");
  } else {
    lines.push_back(
        "batch plan: global batch " + run.plan.describe() + " (" +
        (run.plan.derived.empty() ? std::string("all given") : run.plan.derived + " derived") +
        "); " + std::to_string(run.epoch.updates_per_epoch) + " updates and " +
        std::to_string(run.epoch.micro_steps_per_epoch) + " micro-steps per epoch" +
        (world_size > 1 ? " per rank" : ""));
  }
  if (run.auto_batch) {
    const GrowthRule& rule = *run.auto_batch;
    lines.push_back(
        "global batch auto: starts at " + std::to_string(run.plan.global_batch_size) +
        ", doubles while the predicted goodput gain is at least " +
        format_significant(100 * rule.threshold, 3) +
        (rule.predict_at == GrowthPrediction::BandLow
             ? "% (at the noise scale's low end; an update's cost "
             : "% (at the noise scale's estimate, --growth-predict-at estimate; an update's "
               "cost ") +
        (rule.update_cost ? "given as " + format_significant(*rule.update_cost, 4) + " samples"
                          : "timed over updates " + std::to_string(kCostWarmupUpdates + 1) + "-" +
                                std::to_string(kCostWarmupUpdates + kCostCalibrationUpdates) +
                                (world_size > 1 ? " on rank 0" : "")) +
        "), at most " + std::to_string(rule.max_global_batch) +
        (run.auto_batch_limit_note.empty() ? std::string()
                                           : " (" + run.auto_batch_limit_note + ")") +
        (rule.branch_test
             ? ", each doubling tested on " + std::to_string(start.controller_samples) +
                   " samples set aside, the tests throwing away at most " +
                   format_significant(100 * rule.test_budget, 3) + "% of the samples trained"
             : ", untested (--growth-test none)") +
        "; " + rate_with_the_batch(config, run));
  } else if (run.ramp) {
    lines.push_back("global batch schedule " + run.ramp->batches.to_string() + ": " +
                    std::to_string(run.ramp->phases.size()) + " steps, " +
                    std::to_string(run.total_updates) + " updates; " +
                    rate_with_the_batch(config, run));
  } else if (run.schedule.config().kind == ScheduleKind::RangeTest) {
    const LrScheduleConfig& schedule = run.schedule.config();
    lines.push_back("lr rising exponentially from " +
                    format_significant(schedule.base_lr * schedule.min_lr_factor) + " to " +
                    format_significant(schedule.base_lr) + " over " +
                    count_of(schedule.total_updates, "update") + " at global batch " +
                    std::to_string(run.plan.global_batch_size) +
                    " (the range test: no scaling, warmup or schedule)");
  } else {
    const int64_t schedule_updates = run.schedule.config().total_updates;
    lines.push_back(run.schedule.describe_scaling() + ", warmup " +
                    count_of(run.schedule.config().warmup_updates, "update") + ", " +
                    to_string(run.schedule.config().kind) + " schedule over " +
                    count_of(schedule_updates, "update") +
                    (schedule_updates != run.total_updates
                         ? " (--schedule-length; the run trains " +
                               count_of(run.total_updates, "update") +
                               (schedule_updates < run.total_updates
                                    ? ", the rate holding its final value past the schedule's end)"
                                    : ")")
                         : std::string()));
  }
  if (run.eval_every_samples > 0) {
    lines.push_back("evaluation: every " + std::to_string(run.eval_every_samples) +
                    " samples (--eval-every " + config.eval_every.to_string() +
                    ", counted in samples as the batch changes) and at each epoch's end");
  }
  if (run.eval_every_updates > 0) {
    lines.push_back("evaluation: every " + std::to_string(run.eval_every_updates) +
                    " updates (--eval-every " + config.eval_every.to_string() +
                    ") and at each epoch's end");
  }
  if (config.micro_batch_tokens > 0) {
    lines.push_back("micro-batches: at most " + std::to_string(config.micro_batch_tokens) +
                    " padded tokens each (rows x longest), cut inside every window after sorting "
                    "its samples by length; the update is that of the whole window");
  }
  for (const auto& warning : run.epoch.warnings)
    lines.push_back("warning: " + warning);
  for (const auto& warning : run.schedule.warnings())
    lines.push_back("warning: " + warning);
  return lines;
}

}  // namespace bigbatch
