#include "config/resolved_run.h"

#include <algorithm>

#include "core/error.h"

namespace bigbatch {

namespace {
LrSchedule make_schedule(const TrainConfig& config, const BatchPlan& plan, const EpochPlan& epoch,
                         int64_t total_updates) {
  LrScheduleConfig s;
  s.base_lr = config.lr;
  s.reference_batch = config.lr_ref_batch.value_or(plan.global_batch_size);
  s.global_batch = plan.global_batch_size;
  const bool adaptive = is_adaptive(config.optimizer);
  s.scaling = resolve_lr_scaling(config.lr_scaling, adaptive);
  if (config.lr_scaling == LrScaling::Auto)
    s.scaling_note = std::string("auto for ") + to_string(config.optimizer);
  s.warmup_updates = config.warmup.to_updates(plan, epoch);
  s.warmup_start_factor = config.warmup_start_factor;
  s.kind = config.schedule;
  s.total_updates = total_updates;
  s.min_lr_factor = config.min_lr_factor;
  for (const auto& milestone : config.step_milestones)
    s.milestones.push_back(milestone.to_updates(plan, epoch));
  s.gamma = config.step_gamma;
  return LrSchedule(s);
}
}  // namespace

ResolvedRun resolve_run(const TrainConfig& config, int64_t dataset_size, int64_t world_size) {
  if (config.micro_batch_auto) {
    throw Error(ErrorKind::Plan,
                "--micro-batch auto is measured when training starts, not planned ahead",
                "run 'bigbatch fit --model " + config.model +
                    " --memory-budget SIZE' to see the size it would pick, then plan with it");
  }
  const BatchPlan plan = BatchPlan::resolve(config.batch_request(world_size));
  const EpochPlan epoch = plan_epoch(plan, dataset_size, config.last_window);
  if (config.strict_batch && epoch.last_window_size > 0) {
    throw Error(ErrorKind::Plan,
                "--strict-batch: the last update of each epoch would have " +
                    std::to_string(epoch.last_window_size) + " samples, not the global batch " +
                    std::to_string(plan.global_batch_size) + " (" + std::to_string(dataset_size) +
                    " samples per epoch)",
                "add --last-window drop, or choose a global batch that divides " +
                    std::to_string(dataset_size));
  }
  int64_t total = config.epochs * epoch.updates_per_epoch;
  if (config.max_updates)
    total = std::min(total, *config.max_updates);
  const int64_t epochs =
      std::min(config.epochs, (total + epoch.updates_per_epoch - 1) / epoch.updates_per_epoch);
  ResolvedRun run{plan, epoch, make_schedule(config, plan, epoch, total), epochs, total, {}};
  if (config.adam_sqrt_adjust) {
    if (run.schedule.config().scaling != LrScaling::Sqrt) {
      throw Error(ErrorKind::Config,
                  "--adam-sqrt-adjust belongs to the square-root rule, but the rule is " +
                      std::string(to_string(run.schedule.config().scaling)),
                  "use --lr-scaling sqrt (or auto with adamw)");
    }
    const double kappa =
        double(plan.global_batch_size) / double(run.schedule.config().reference_batch);
    run.adam =
        scale_adam_hyperparameters({config.adam_beta1, config.adam_beta2, config.adam_eps}, kappa);
  }
  return run;
}

}  // namespace bigbatch
