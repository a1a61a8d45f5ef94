#include "config/resolved_run.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {
// `plan` and `epoch` count the schedule's updates: the run's own, or the reference batch's
// under AdaScale. The global batch is always the run's.
LrSchedule make_schedule(const TrainConfig& config, int64_t global_batch, const BatchPlan& plan,
                         const EpochPlan& epoch, int64_t total_updates) {
  LrScheduleConfig s;
  s.base_lr = config.base_lr();
  s.reference_batch = config.lr_reference(global_batch);
  s.reference_note = config.lr_reference_note();
  s.global_batch = global_batch;
  s.layer_wise_trust = config.optimizer == OptimizerKind::Lars;
  s.plain_sgd = config.optimizer == OptimizerKind::Sgd;
  s.scaling = resolve_lr_scaling(config.lr_scaling, s.layer_wise_trust);
  s.warmup_updates = config.warmup.to_updates(plan, epoch);
  s.warmup_start_factor = config.warmup_start_factor;
  s.kind = config.schedule;
  s.total_updates = config.schedule_length
                        ? std::max<int64_t>(1, config.schedule_length->to_updates(plan, epoch))
                        : total_updates;
  s.min_lr_factor = config.min_lr_factor;
  for (const auto& milestone : config.step_milestones)
    s.milestones.push_back(milestone.to_updates(plan, epoch));
  s.gamma = config.step_gamma;
  if (config.adam_sqrt_adjust_on())
    s.adam_at_reference =
        AdamHyperparameters{config.adam_beta1, config.adam_beta2, config.adam_eps};
  return LrSchedule(s);
}

// --adam-sqrt-adjust is the rest of the square-root rule: refused under another rule.
void check_adam_sqrt_adjust_rule(const LrSchedule& schedule) {
  if (schedule.config().adam_at_reference && schedule.config().scaling != LrScaling::Sqrt) {
    throw Error(ErrorKind::Config,
                "--adam-sqrt-adjust belongs to the square-root rule, but the rule is " +
                    std::string(to_string(schedule.config().scaling)),
                "use --lr-scaling sqrt (or auto with adamw)");
  }
}

// How a message names the betas' adjustment, and the way to turn it off: the flag, or its
// default under --global-batch auto.
std::string adam_sqrt_adjust_named(const TrainConfig& config) {
  return config.adam_sqrt_adjust_by_default()
             ? "--adam-sqrt-adjust (on by default for adamw under --global-batch auto)"
             : "--adam-sqrt-adjust";
}
std::string adam_sqrt_adjust_off(const TrainConfig& config) {
  return config.adam_sqrt_adjust_by_default() ? "add --no-adam-sqrt-adjust"
                                              : "drop --adam-sqrt-adjust";
}

// The largest batch --adam-sqrt-adjust can train at from `schedule`'s reference (no limit
// without it), and what bounds it: "beta1 0.9 reaches 0 at 10x the rate's reference batch 32".
struct AdamBatchLimit {
  int64_t largest = std::numeric_limits<int64_t>::max();
  std::string why;
};
AdamBatchLimit adam_batch_limit(const LrSchedule& schedule) {
  const auto& base = schedule.config().adam_at_reference;
  if (!base)
    return {};
  const int64_t reference = schedule.config().reference_batch;
  const bool first = base->beta1 <= base->beta2;
  const double beta = first ? base->beta1 : base->beta2;
  return {largest_adam_adjusted_batch(*base, reference),
          std::string(first ? "beta1 " : "beta2 ") + format_significant(beta) + " reaches 0 at " +
              format_significant(1 / (1 - beta)) + "x the rate's reference batch " +
              std::to_string(reference)};
}

// AdaScale's preconditions, then its reference schedule and the bounds on the run's length.
ResolvedRun resolve_adascale_run(const TrainConfig& config, const BatchPlan& plan,
                                 const EpochPlan& epoch, int64_t dataset_size) {
  if (config.optimizer != OptimizerKind::Sgd) {
    throw Error(ErrorKind::Config,
                std::string("--lr-scaling adascale is defined for SGD, not ") +
                    to_string(config.optimizer) + " (Johnson et al. 2020)",
                std::string("use --optimizer sgd, or --lr-scaling auto for ") +
                    to_string(config.optimizer));
  }
  if (!config.lr_ref_batch && config.lr) {
    throw Error(ErrorKind::Config,
                "--lr-scaling adascale needs --lr-ref-batch: the batch the base --lr was tuned at",
                "add e.g. --lr-ref-batch " +
                    std::to_string(std::max<int64_t>(1, plan.global_batch_size / 8)));
  }
  const int64_t reference = config.lr_reference(plan.global_batch_size);
  if (reference <= 0 || reference > dataset_size) {
    throw Error(
        ErrorKind::Config,
        (config.lr_ref_batch ? "--lr-ref-batch " + std::to_string(reference)
                             : "the default rate's batch, " + std::to_string(reference) + ",") +
            " must be between 1 and the dataset's " + std::to_string(dataset_size) + " samples",
        "pass --lr and --lr-ref-batch: the rate and the batch it was tuned at");
  }
  if (!config.noise_scale || plan.accumulation_steps * plan.world_size < 2) {
    throw Error(ErrorKind::Config,
                std::string("--lr-scaling adascale measures its gain from two batch sizes per ") +
                    "update, which needs accumulation steps or ranks of 2 or more" +
                    (config.noise_scale ? ""
                                        : " and the noise measurement (--no-noise-scale "
                                          "is set)"),
                "use a --micro-batch smaller than the global batch" +
                    std::string(config.noise_scale ? "" : ", and drop --no-noise-scale"));
  }
  if (config.adam_sqrt_adjust_on()) {
    throw Error(ErrorKind::Config,
                "--adam-sqrt-adjust carries adamw's betas along the square-root rule, but "
                "--lr-scaling adascale measures its own gain from SGD's gradients",
                "drop --adam-sqrt-adjust");
  }
  // The reference schedule: --epochs of updates at the reference batch.
  BatchPlan reference_plan;
  reference_plan.micro_batch_size = reference;
  reference_plan.global_batch_size = reference;
  const EpochPlan reference_epoch =
      plan_epoch(reference_plan, dataset_size, config.last_window, epoch.items_per_sample);
  ResolvedRun::AdaScaleRun adascale;
  adascale.reference_batch = reference;
  adascale.scale = double(plan.global_batch_size) / double(reference);
  adascale.scale_invariant_total = config.epochs * reference_epoch.updates_per_epoch;
  // tau grows by at least min(1, S) per update.
  int64_t total = static_cast<int64_t>(
      std::ceil(double(adascale.scale_invariant_total) / std::min(1.0, adascale.scale)));
  if (config.max_updates)
    total = std::min(total, *config.max_updates);
  const int64_t epochs = (total + epoch.updates_per_epoch - 1) / epoch.updates_per_epoch;
  ResolvedRun run{plan,
                  epoch,
                  make_schedule(config, plan.global_batch_size, reference_plan, reference_epoch,
                                adascale.scale_invariant_total),
                  epochs,
                  total,
                  {},
                  adascale,
                  {}};
  return run;
}

// Simulates the ramp over the run for its length and phases; the LR schedule counts
// reference-batch updates.
ResolvedRun resolve_ramp_run(const TrainConfig& config, GlobalBatchSchedule batches,
                             int64_t dataset_size, int64_t world_size, double items_per_sample) {
  if (config.lr_scaling == LrScaling::AdaScale) {
    throw Error(ErrorKind::Config,
                "--global-batch-schedule and --lr-scaling adascale both adapt to the batch: "
                "AdaScale's gain already follows a larger batch",
                "use one of them: a ramp with --lr-scaling linear or sqrt, or adascale at one "
                "batch");
  }
  ResolvedRun::RampRun ramp;
  ramp.batches = std::move(batches);
  const int64_t micro = config.micro_batch.value_or(kDefaultMicroBatchSize);
  const BatchPlan plan =
      plan_for_ramp_step(ramp.batches.steps().front().global_batch, micro, world_size);
  const EpochPlan epoch = plan_epoch(plan, dataset_size, config.last_window, items_per_sample);
  ramp.phases = simulate_ramp(
      ramp.batches,
      [&](int64_t global) {
        const BatchPlan step = plan_for_ramp_step(global, micro, world_size);
        plan_epoch(step, dataset_size, config.last_window);  // the same checks as a fixed plan
        return step;
      },
      dataset_size, config.last_window, config.epochs,
      config.max_updates.value_or(std::numeric_limits<int64_t>::max()));
  int64_t total = 0;
  for (const auto& phase : ramp.phases) {
    total += phase.updates;
    ramp.total_samples += phase.samples;
    if (config.strict_batch && phase.short_windows > 0) {
      throw Error(
          ErrorKind::Plan,
          "--strict-batch: " + std::to_string(phase.short_windows) + " updates at global batch " +
              std::to_string(phase.global_batch) + " would end an epoch with fewer samples",
          "add --last-window drop, or choose batches that divide " + std::to_string(dataset_size));
    }
  }
  ramp.reference_batch = config.lr_reference(plan.global_batch_size);
  BatchPlan reference_plan;
  reference_plan.micro_batch_size = std::min(ramp.reference_batch, dataset_size);
  reference_plan.global_batch_size = ramp.reference_batch;
  const EpochPlan reference_epoch =
      plan_epoch(reference_plan, dataset_size, config.last_window, items_per_sample);
  const int64_t reference_updates =
      (ramp.total_samples + ramp.reference_batch - 1) / ramp.reference_batch;
  LrSchedule schedule = make_schedule(config, ramp.reference_batch, reference_plan, reference_epoch,
                                      reference_updates);
  ResolvedRun run{plan, epoch, schedule, config.epochs, total, {}, {}, ramp};
  check_adam_sqrt_adjust_rule(run.schedule);
  // Every phase trains at its own betas (LrSchedule::adam_at); the largest batch bounds them.
  const AdamBatchLimit limit = adam_batch_limit(run.schedule);
  for (const auto& phase : run.ramp->phases) {
    if (phase.global_batch > limit.largest) {
      throw Error(
          ErrorKind::Config,
          adam_sqrt_adjust_named(config) + ": the global batch " +
              std::to_string(phase.global_batch) +
              (config.global_batch_auto ? " that --global-batch auto starts at"
                                        : " of the --global-batch-schedule") +
              " is past the betas' range (" + limit.why + ")",
          (config.global_batch_auto
               ? std::string("start at ") + std::to_string(limit.largest) +
                     " or below (--micro-batch)"
               : "keep the schedule's batches at " + std::to_string(limit.largest) + " or below") +
              ", raise --lr-ref-batch, or " + adam_sqrt_adjust_off(config));
    }
  }
  run.adam = run.schedule.adam_at(plan.global_batch_size);
  return run;
}

// --global-batch auto: a ramp of one step at micro x accumulation x ranks, which the trainer
// extends as it decides (schedule/run_schedule.h, AutoBatchSchedule). The run's length and the
// LR schedule are those of staying at the start: both count samples, so growing moves neither.
ResolvedRun resolve_auto_batch_run(const TrainConfig& config, int64_t dataset_size,
                                   int64_t world_size, double items_per_sample) {
  // The noise scale needs two batch sizes inside an update: a second micro-step on one
  // process (several ranks pool their first micro-steps instead).
  const int64_t least_accumulation = world_size > 1 ? 1 : 2;
  if (config.accum_steps && *config.accum_steps < least_accumulation) {
    throw Error(ErrorKind::Config,
                "--global-batch auto measures the noise scale inside each update, which needs "
                "two micro-steps in one process: --accum-steps 1 leaves nothing to measure",
                "drop --accum-steps (auto starts at 2), or give --accum-steps 2 or more");
  }
  const int64_t start = config.micro_batch.value_or(kDefaultMicroBatchSize) *
                        config.accum_steps.value_or(least_accumulation) * world_size;
  ResolvedRun run =
      resolve_ramp_run(config, GlobalBatchSchedule::parse("0:" + std::to_string(start)),
                       dataset_size, world_size, items_per_sample);
  GrowthRule rule;
  rule.max_global_batch = config.max_global_batch > 0
                              ? config.max_global_batch
                              : std::max(start, std::min(64 * start, dataset_size));
  if (rule.max_global_batch < start) {
    throw Error(ErrorKind::Config,
                "--max-global-batch " + std::to_string(rule.max_global_batch) +
                    " is below the batch --global-batch auto starts at, " + std::to_string(start) +
                    " (micro-batch x accumulation x ranks)",
                "raise --max-global-batch, or start smaller with --micro-batch");
  }
  // --adam-sqrt-adjust: the betas bound the growth; a limit left to the default stops at the
  // last doubling within their range.
  const AdamBatchLimit limit = adam_batch_limit(run.schedule);
  if (rule.max_global_batch > limit.largest) {
    if (config.max_global_batch > 0) {
      throw Error(ErrorKind::Config,
                  "--max-global-batch " + std::to_string(rule.max_global_batch) +
                      " is past the betas' range under " + adam_sqrt_adjust_named(config) + " (" +
                      limit.why + ")",
                  "use --max-global-batch " + std::to_string(limit.largest) +
                      " or less, raise --lr-ref-batch, or " + adam_sqrt_adjust_off(config));
    }
    // The largest doubling of the start within the range: what the growth can reach.
    rule.max_global_batch = start;
    while (rule.max_global_batch <= limit.largest / 2)
      rule.max_global_batch *= 2;
    run.auto_batch_limit_note =
        "the last doubling before " + limit.why +
        (config.adam_sqrt_adjust_by_default() ? "; --no-adam-sqrt-adjust lifts the limit"
                                              : " under --adam-sqrt-adjust");
  }
  rule.threshold = config.growth_threshold;
  rule.predict_at = config.growth_predict_at;
  rule.update_cost = config.update_cost;
  rule.dataset_size = dataset_size;
  rule.must_divide = config.strict_batch;
  rule.branch_test = config.growth_test == GrowthTest::Branch;
  rule.control = config.growth_control;
  rule.test_budget = config.growth_test_budget;
  rule.holdout = config.growth_holdout_samples(dataset_size);
  run.auto_batch = rule;
  return run;
}

// The plan, the run's length and its rates (everything but the evaluation interval).
ResolvedRun resolve_batches_and_rates(const TrainConfig& config, int64_t dataset_size,
                                      int64_t world_size, double items_per_sample) {
  if (config.micro_batch_auto) {
    throw Error(ErrorKind::Plan,
                "--micro-batch auto is measured when training starts, not planned ahead",
                "run 'bigbatch fit --model " + config.model +
                    " --memory-budget SIZE' to see the size it would pick, then plan with it");
  }
  if (config.global_batch_auto)
    return resolve_auto_batch_run(config, dataset_size, world_size, items_per_sample);
  if (!config.global_batch_schedule.empty()) {
    return resolve_ramp_run(config, GlobalBatchSchedule::parse(config.global_batch_schedule),
                            dataset_size, world_size, items_per_sample);
  }
  const BatchPlan plan = BatchPlan::resolve(config.batch_request(world_size));
  const EpochPlan epoch = plan_epoch(plan, dataset_size, config.last_window, items_per_sample);
  if (config.strict_batch && epoch.last_window_size > 0) {
    throw Error(ErrorKind::Plan,
                "--strict-batch: the last update of each epoch would have " +
                    std::to_string(epoch.last_window_size) + " samples, not the global batch " +
                    std::to_string(plan.global_batch_size) + " (" + std::to_string(dataset_size) +
                    " samples per epoch)",
                "add --last-window drop, or choose a global batch that divides " +
                    std::to_string(dataset_size));
  }
  if (config.lr_scaling == LrScaling::AdaScale)
    return resolve_adascale_run(config, plan, epoch, dataset_size);
  int64_t total = config.epochs * epoch.updates_per_epoch;
  if (config.max_updates)
    total = std::min(total, *config.max_updates);
  const int64_t epochs =
      std::min(config.epochs, (total + epoch.updates_per_epoch - 1) / epoch.updates_per_epoch);
  ResolvedRun run{plan,   epoch, make_schedule(config, plan.global_batch_size, plan, epoch, total),
                  epochs, total, {},
                  {},     {}};
  check_adam_sqrt_adjust_rule(run.schedule);
  run.adam = run.schedule.adam_at(plan.global_batch_size);
  return run;
}

}  // namespace

ResolvedRun resolve_run(const TrainConfig& config, int64_t dataset_size, int64_t world_size,
                        double items_per_sample) {
  ResolvedRun run = resolve_batches_and_rates(config, dataset_size, world_size, items_per_sample);
  if (!config.eval_every.is_zero() && run.ramp &&
      config.eval_every.unit() != Interval::Unit::Updates) {
    const Interval& every = config.eval_every;
    double samples = every.value();
    if (every.unit() == Interval::Unit::Epochs)
      samples *= double(dataset_size);
    if (every.unit() == Interval::Unit::Tokens) {
      if (items_per_sample <= 0)
        every.to_updates(run.plan, run.epoch);  // throws: tokens need token rows
      samples /= items_per_sample;
    }
    run.eval_every_samples = std::max<int64_t>(1, static_cast<int64_t>(std::llround(samples)));
  } else if (!config.eval_every.is_zero()) {
    // Converted at the first plan, like the warmup: an interval in tokens needs token rows.
    run.eval_every_updates =
        std::max<int64_t>(1, config.eval_every.to_updates(run.plan, run.epoch));
  }
  run.micro_batch_tokens = config.micro_batch_tokens;
  return run;
}

std::unique_ptr<RunSchedule> make_run_schedule(const ResolvedRun& run) {
  const RunBounds bounds{run.epochs, run.total_updates};
  if (run.auto_batch) {
    return std::make_unique<AutoBatchSchedule>(run.plan, run.epoch, run.schedule, bounds,
                                               run.ramp->reference_batch, *run.auto_batch);
  }
  if (run.ramp) {
    return std::make_unique<RampSchedule>(run.plan, run.epoch, run.schedule, bounds,
                                          run.ramp->batches, run.ramp->reference_batch);
  }
  if (run.adascale) {
    return std::make_unique<AdaScaleSchedule>(run.plan, run.epoch, run.schedule, bounds,
                                              run.adascale->reference_batch,
                                              run.adascale->scale_invariant_total);
  }
  return std::make_unique<FixedSchedule>(run.plan, run.epoch, run.schedule, bounds);
}

}  // namespace bigbatch
