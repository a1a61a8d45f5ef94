// The run schedule, one regime at a time: what the fit loop asks of it (the plan in force, each
// update's rate, the run's end, its expected length, the back-off's smaller micro-batch, the plan
// a checkpoint resumes under, what a checkpoint's counters must satisfy) — worked by hand on a
// dataset of 1000 samples.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "config/resolved_run.h"
#include "schedule/adascale.h"
#include "schedule/run_schedule.h"

namespace bigbatch {
namespace {

constexpr int64_t kSamples = 1000;

BatchPlan plan_of(int64_t global, int64_t micro) {
  return plan_for_ramp_step(global, micro, /*world=*/1);
}

EpochPlan epoch_of(const BatchPlan& plan, int64_t dataset_size = kSamples) {
  return plan_epoch(plan, dataset_size, LastWindow::Keep);
}

LrSchedule linear_decay(double base_lr, int64_t total_updates) {
  LrScheduleConfig c;
  c.base_lr = base_lr;
  c.kind = ScheduleKind::Linear;
  c.total_updates = total_updates;
  return LrSchedule(c);
}

TrainingProgress at_update(int64_t step, int64_t epoch, int64_t update_in_epoch,
                           int64_t position_in_epoch, int64_t samples_seen) {
  TrainingProgress at;
  at.step = step;
  at.epoch = epoch;
  at.update_in_epoch = update_in_epoch;
  at.position_in_epoch = position_in_epoch;
  at.samples_seen = samples_seen;
  return at;
}

// --- One global batch -------------------------------------------------------------------------

FixedSchedule fixed_100() {
  // 100 = micro 50 x accumulation 2: ten updates an epoch, three epochs.
  const BatchPlan plan = plan_of(100, 50);
  return FixedSchedule(plan, epoch_of(plan), linear_decay(0.1, 30), RunBounds{3, 30});
}

TEST(FixedSchedule, TheRateIsTheCurveAtTheUpdateIndex) {
  const FixedSchedule schedule = fixed_100();
  for (const int64_t step : {0, 1, 17, 29}) {
    const UpdateRate rate = schedule.rate(at_update(step, step / 10, step % 10, 0, 0), {});
    EXPECT_DOUBLE_EQ(rate.lr, schedule.lr_schedule().lr_at(step));
    EXPECT_DOUBLE_EQ(rate.gain, 1);
  }
  EXPECT_FALSE(schedule.measures_gain());
  EXPECT_EQ(schedule.summary({}), "");
}

TEST(FixedSchedule, CompleteByUpdatesOrEpochs) {
  FixedSchedule schedule = fixed_100();
  EXPECT_FALSE(schedule.complete(at_update(29, 2, 9, 900, 2900)));
  EXPECT_TRUE(schedule.complete(at_update(30, 2, 10, 1000, 3000)));
  EXPECT_TRUE(schedule.complete(at_update(30, 3, 0, 0, 3000)));
  // --max-updates below the epochs' updates: the updates end it.
  const BatchPlan plan = plan_of(100, 50);
  const FixedSchedule capped(plan, epoch_of(plan), linear_decay(0.1, 25), RunBounds{3, 25});
  EXPECT_TRUE(capped.complete(at_update(25, 2, 5, 500, 2500)));
  // An epoch count reached first (a resumed run asked for fewer epochs) ends it as well.
  EXPECT_TRUE(schedule.complete(at_update(12, 3, 0, 0, 1200)));
}

TEST(FixedSchedule, LengthAndEpochProgress) {
  const FixedSchedule schedule = fixed_100();
  const RunLength length = schedule.expected_length(at_update(4, 0, 4, 400, 400));
  EXPECT_EQ(length.updates_per_epoch, 10);
  EXPECT_EQ(length.total_updates, 30);
  EXPECT_EQ(length.epochs, 3);
  EXPECT_DOUBLE_EQ(schedule.epoch_progress(at_update(4, 0, 4, 400, 400)), 0.4);
}

TEST(FixedSchedule, BackingOffKeepsTheGlobalBatch) {
  FixedSchedule schedule = fixed_100();
  schedule.set_micro_batch(25);
  EXPECT_EQ(schedule.plan().global_batch_size, 100);
  EXPECT_EQ(schedule.plan().micro_batch_size, 25);
  EXPECT_EQ(schedule.plan().accumulation_steps, 4);
  EXPECT_EQ(schedule.epoch().updates_per_epoch, 10);
  EXPECT_EQ(schedule.epoch().micro_steps_per_epoch, 40);
  EXPECT_EQ(schedule.epoch().dataset_size, kSamples);
  // Nothing to restore: one batch throughout.
  TrainingProgress at = at_update(5, 0, 5, 500, 500);
  at.global_batch = 100;
  EXPECT_FALSE(schedule.restore(at));
  EXPECT_EQ(schedule.plan().micro_batch_size, 25);
}

TEST(FixedSchedule, CheckpointCountersMustFollowFromEachOther) {
  const FixedSchedule schedule = fixed_100();
  EXPECT_EQ(schedule.inconsistency(at_update(13, 1, 3, 300, 1300)), "");
  EXPECT_NE(schedule.inconsistency(at_update(13, 1, 3, 250, 1250))
                .find("progress.position_in_epoch 250 where update 3 of an epoch of 10 updates of "
                      "100 samples starts"),
            std::string::npos);
  EXPECT_NE(schedule.inconsistency(at_update(25, 1, 3, 300, 1300)).find("progress.step 25"),
            std::string::npos);
  EXPECT_NE(schedule.inconsistency(at_update(13, 1, 3, 300, 2300)).find("progress.samples_seen"),
            std::string::npos);
  // An epoch's short last window ends at the dataset's size.
  const BatchPlan plan = plan_of(100, 50);
  const FixedSchedule short_last(plan, epoch_of(plan, 950), linear_decay(0.1, 30),
                                 RunBounds{3, 30});
  EXPECT_EQ(short_last.inconsistency(at_update(10, 0, 10, 950, 950)), "");
}

// --- A batch ramp -----------------------------------------------------------------------------

// 100 until 300 samples, 200 until the third epoch, then 500; the curve is constant, so the rate
// is the linear rule's factor from the reference batch of 100.
RampSchedule ramp_100_200_500() {
  LrScheduleConfig c;
  c.base_lr = 0.1;
  c.reference_batch = 100;
  c.global_batch = 100;
  c.scaling = LrScaling::Linear;
  const BatchPlan plan = plan_of(100, 50);
  return RampSchedule(plan, epoch_of(plan), LrSchedule(c), RunBounds{3, 15},
                      GlobalBatchSchedule::parse("0:100 300s:200 2e:500"),
                      /*reference_batch=*/100);
}

TEST(RampSchedule, SwitchesOnceAtTheFirstUpdatePastAThreshold) {
  RampSchedule schedule = ramp_100_200_500();
  EXPECT_FALSE(schedule.plan_update(at_update(2, 0, 2, 200, 200)).has_value());
  EXPECT_DOUBLE_EQ(schedule.rate(at_update(2, 0, 2, 200, 200), {}).lr, 0.1);

  const TrainingProgress past = at_update(3, 0, 3, 300, 300);
  EXPECT_EQ(schedule.global_batch_at(past), 200);  // read without switching
  EXPECT_EQ(schedule.plan().global_batch_size, 100);
  const auto change = schedule.plan_update(past);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->from_global_batch, 100);
  EXPECT_EQ(change->plan.global_batch_size, 200);
  EXPECT_EQ(change->plan.micro_batch_size, 50);  // memory stays: accumulation grows
  EXPECT_EQ(change->plan.accumulation_steps, 4);
  EXPECT_DOUBLE_EQ(change->lr, 0.2);
  EXPECT_DOUBLE_EQ(schedule.rate(past, {}).lr, change->lr);  // announced as trained
  EXPECT_EQ(schedule.plan().global_batch_size, 200);
  EXPECT_EQ(schedule.epoch().updates_per_epoch, 5);
  EXPECT_FALSE(schedule.plan_update(at_update(4, 0, 4, 500, 500)).has_value());
}

TEST(RampSchedule, AdamsBetasFollowEachStepOfTheBatch) {
  // --adam-sqrt-adjust: each update trains at the betas of its batch (kappa = batch / 100), and
  // the switch announces them; without it the rate carries none.
  LrScheduleConfig c;
  c.base_lr = 1e-3;
  c.reference_batch = 100;
  c.global_batch = 100;
  c.scaling = LrScaling::Sqrt;
  c.adam_at_reference = AdamHyperparameters{0.9, 0.999, 1e-8};
  const BatchPlan plan = plan_of(100, 50);
  RampSchedule schedule(plan, epoch_of(plan), LrSchedule(c), RunBounds{3, 15},
                        GlobalBatchSchedule::parse("0:100 300s:200 2e:500"),
                        /*reference_batch=*/100);
  const UpdateRate first = schedule.rate(at_update(0, 0, 0, 0, 0), {});
  ASSERT_TRUE(first.adam.has_value());
  EXPECT_EQ(first.adam->beta1, 0.9);
  const TrainingProgress past = at_update(3, 0, 3, 300, 300);
  const auto change = schedule.plan_update(past);
  ASSERT_TRUE(change.has_value() && change->adam.has_value());
  EXPECT_NEAR(change->adam->beta1, 0.8, 1e-12);
  EXPECT_NEAR(change->adam->beta2, 0.998, 1e-12);
  EXPECT_NEAR(change->adam->eps, 1e-8 / std::sqrt(2.0), 1e-22);
  EXPECT_DOUBLE_EQ(change->lr, 1e-3 * std::sqrt(2.0));
  const UpdateRate second = schedule.rate(past, {});
  EXPECT_EQ(second.adam->beta1, change->adam->beta1);  // announced as trained
  const auto last = schedule.plan_update(at_update(5, 2, 0, 0, 2000));
  ASSERT_TRUE(last.has_value());
  EXPECT_NEAR(last->adam->beta1, 0.5, 1e-12);  // kappa 5
  EXPECT_FALSE(ramp_100_200_500().rate(past, {}).adam.has_value());
}

TEST(RampSchedule, ABackedOffMicroBatchCarriesIntoTheNextStep) {
  RampSchedule schedule = ramp_100_200_500();
  ASSERT_TRUE(schedule.plan_update(at_update(3, 0, 3, 300, 300)).has_value());
  schedule.set_micro_batch(25);
  const auto change = schedule.plan_update(at_update(12, 2, 0, 0, 2000));
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->from_global_batch, 200);
  EXPECT_EQ(change->plan.global_batch_size, 500);
  EXPECT_EQ(change->plan.micro_batch_size, 25);
  EXPECT_EQ(change->plan.accumulation_steps, 20);
  EXPECT_DOUBLE_EQ(change->lr, 0.5);
}

TEST(RampSchedule, ResumesUnderTheLastUpdatesBatchAndSwitchesFromThere) {
  RampSchedule schedule = ramp_100_200_500();
  TrainingProgress at = at_update(12, 2, 0, 0, 2000);
  at.global_batch = 200;  // the checkpoint's last update ran at 200
  EXPECT_TRUE(schedule.restore(at));
  EXPECT_EQ(schedule.plan().global_batch_size, 200);
  EXPECT_EQ(schedule.plan().accumulation_steps, 4);
  // The next update is past 2e: the switch is made (and so announced) after the resume.
  const auto change = schedule.plan_update(at);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->from_global_batch, 200);
  // A fresh run's checkpoint (no update yet) and one at the first batch change nothing.
  RampSchedule fresh = ramp_100_200_500();
  EXPECT_FALSE(fresh.restore(TrainingProgress{}));
  at.global_batch = 100;
  EXPECT_FALSE(fresh.restore(at));
}

TEST(RampSchedule, LengthAndProgressFollowThePosition) {
  RampSchedule schedule = ramp_100_200_500();
  const TrainingProgress at = at_update(3, 0, 3, 300, 300);
  ASSERT_TRUE(schedule.plan_update(at).has_value());
  // Three updates done, 700 samples left at 200: four more (the last one short).
  EXPECT_EQ(schedule.expected_length(at).updates_per_epoch, 7);
  EXPECT_EQ(schedule.expected_length(at).total_updates, 15);
  EXPECT_DOUBLE_EQ(schedule.epoch_progress(at), 0.3);
  // Windows of several sizes: the counters do not follow from each other.
  EXPECT_EQ(schedule.inconsistency(at_update(3, 0, 3, 250, 250)), "");
}

// --- AdaScale ---------------------------------------------------------------------------------

// 400 = micro 100 x accumulation 4 against a reference of 100 (S = 4); the reference schedule
// is 20 scale-invariant updates long.
AdaScaleSchedule adascale_400() {
  LrScheduleConfig c;
  c.base_lr = 0.1;
  c.reference_batch = 100;
  c.global_batch = 400;
  c.scaling = LrScaling::AdaScale;
  c.kind = ScheduleKind::Linear;
  c.total_updates = 20;
  const BatchPlan plan = plan_of(400, 100);
  return AdaScaleSchedule(plan, epoch_of(plan), LrSchedule(c), RunBounds{7, 20},
                          /*reference_batch=*/100, /*scale_invariant_total=*/20);
}

TEST(AdaScaleSchedule, TheGainComesFromTheMeasuredGradients) {
  const AdaScaleSchedule schedule = adascale_400();
  TrainingProgress at = at_update(3, 1, 0, 0, 1200);
  at.scale_invariant_step = 6.7;
  // Nothing measured yet: a gain of 1, at the curve's floor(tau).
  UpdateRate rate = schedule.rate(at, {400, nullptr});
  EXPECT_DOUBLE_EQ(rate.gain, 1);
  EXPECT_DOUBLE_EQ(rate.lr, schedule.lr_schedule().lr_at(6));
  NoiseScaleTracker noise;
  noise.add({/*small_batch=*/100, /*small_sq_norm=*/5, /*big_batch=*/400, /*big_sq_norm=*/2});
  rate = schedule.rate(at, {400, &noise});
  const double gain = adascale_gain(400, 100, noise.trace(), noise.gradient_sq()).gain;
  EXPECT_GT(gain, 1);
  EXPECT_LE(gain, 4);
  EXPECT_DOUBLE_EQ(rate.gain, gain);
  EXPECT_DOUBLE_EQ(rate.lr, gain * schedule.lr_schedule().lr_at(6));
  EXPECT_TRUE(schedule.measures_gain());
}

TEST(AdaScaleSchedule, CountsScaleInvariantUpdatesAndEndsAtTheirTotal) {
  const AdaScaleSchedule schedule = adascale_400();
  TrainingProgress at;
  schedule.count(at, {0.1, 2.5}, /*applied=*/true);
  EXPECT_DOUBLE_EQ(at.scale_invariant_step, 2.5);
  schedule.count(at, {0.1, 3.0}, /*applied=*/false);  // a skipped update taught nothing
  EXPECT_DOUBLE_EQ(at.scale_invariant_step, 2.5);
  at = at_update(6, 2, 0, 0, 2400);
  at.scale_invariant_step = 19.5;
  EXPECT_FALSE(schedule.complete(at));
  at.scale_invariant_step = 20;
  EXPECT_TRUE(schedule.complete(at));
  at.scale_invariant_step = 3;
  at.step = 20;  // the bound: a gain of 1 throughout
  EXPECT_TRUE(schedule.complete(at));
}

TEST(AdaScaleSchedule, LengthFollowsTheMeanGainSoFar) {
  const AdaScaleSchedule schedule = adascale_400();
  TrainingProgress at = at_update(5, 1, 2, 800, 2000);
  at.scale_invariant_step = 10;  // a mean gain of 2: five more updates
  const RunLength length = schedule.expected_length(at);
  EXPECT_EQ(length.total_updates, 10);
  EXPECT_EQ(length.updates_per_epoch, 3);  // 400 + 400 + a short 200
  EXPECT_EQ(length.epochs, 4);
  EXPECT_EQ(schedule.summary(at), describe_adascale_run(5, 10, 4));
  // The run's length is in scale-invariant updates: the updates per epoch are not checked.
  EXPECT_EQ(schedule.inconsistency(at_update(50, 1, 2, 800, 2000)), "");
  EXPECT_NE(schedule.inconsistency(at_update(5, 1, 2, 700, 2000)), "");
}

// --- The regime a configuration resolves to ---------------------------------------------------

TEST(RunSchedule, MadeForTheConfiguredRegime) {
  TrainConfig config;
  config.global_batch = 1024;
  config.micro_batch = 128;
  const auto fixed = make_run_schedule(resolve_run(config, 60000, 1));
  EXPECT_NE(dynamic_cast<const FixedSchedule*>(fixed.get()), nullptr);
  EXPECT_EQ(fixed->plan().accumulation_steps, 8);

  config.lr_ref_batch = 64;
  config.lr_scaling = LrScaling::AdaScale;
  const auto adascale = make_run_schedule(resolve_run(config, 60000, 1));
  EXPECT_NE(dynamic_cast<const AdaScaleSchedule*>(adascale.get()), nullptr);

  TrainConfig ramp;
  ramp.global_batch_schedule = "0:256 20000s:1024";
  ramp.micro_batch = 64;
  const ResolvedRun resolved = resolve_run(ramp, 60000, 1);
  const auto schedule = make_run_schedule(resolved);
  EXPECT_NE(dynamic_cast<const RampSchedule*>(schedule.get()), nullptr);
  EXPECT_EQ(schedule->plan().global_batch_size, 256);
  EXPECT_EQ(schedule->bounds().total_updates, resolved.total_updates);
}

// AdamW at 1e-3 tuned at 32, micro-batches of 16: beta1 0.9 reaches 0 at 320.
TrainConfig adamw_tuned_at_32() {
  TrainConfig config;
  config.optimizer = OptimizerKind::AdamW;
  config.lr = 1e-3;
  config.lr_ref_batch = 32;
  config.micro_batch = 16;
  return config;
}

TEST(RunSchedule, AdamsBetasBoundTheBatchesARunMayTrainAt) {
  TrainConfig config = adamw_tuned_at_32();
  config.adam_sqrt_adjust = true;
  config.global_batch_schedule = "0:32 20000s:256";
  ResolvedRun ramp = resolve_run(config, 60000, 1);
  ASSERT_TRUE(ramp.adam.has_value());
  EXPECT_EQ(ramp.adam->beta1, 0.9);  // the start's
  EXPECT_NEAR(make_run_schedule(ramp)->lr_schedule().adam_at(256)->beta1, 0.2, 1e-12);
  config.global_batch_schedule = "0:32 20000s:512";
  try {
    resolve_run(config, 60000, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the global batch 512 of the --global-batch-schedule is "
                                         "past the betas' range (beta1 0.9 reaches 0 at 10x the "
                                         "rate's reference batch 32)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("at 320 or below"), std::string::npos) << e.hint();
  }

  // The automatic batch: a limit left to the default stops at the last doubling within the
  // betas' range; one given past it is refused, naming it.
  config.global_batch_schedule.clear();
  config.global_batch_auto = true;
  const ResolvedRun automatic = resolve_run(config, 60000, 1);
  ASSERT_TRUE(automatic.auto_batch.has_value());
  EXPECT_EQ(automatic.auto_batch->max_global_batch, 256);  // 32 doubled three times; 512 > 320
  config.max_global_batch = 256;
  EXPECT_EQ(resolve_run(config, 60000, 1).auto_batch->max_global_batch, 256);
  config.max_global_batch = 1024;
  try {
    resolve_run(config, 60000, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-global-batch 1024 is past the betas' range"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("use --max-global-batch 320 or less"), std::string::npos) << e.hint();
  }
  config.lr_scaling = LrScaling::Linear;  // the adjustment belongs to the sqrt rule
  config.max_global_batch = 0;
  EXPECT_THROW(resolve_run(config, 60000, 1), Error);
}

TEST(RunSchedule, TheAutomaticBatchAdjustsAdamsBetasUnlessTold) {
  // Unsaid, the betas follow the batch under --global-batch auto with adamw and the square-root
  // rule, and nowhere else; --no-adam-sqrt-adjust keeps them (and the batch's default limit).
  TrainConfig config = adamw_tuned_at_32();
  config.global_batch_auto = true;
  EXPECT_TRUE(config.adam_sqrt_adjust_on());
  EXPECT_TRUE(config.adam_sqrt_adjust_by_default());
  ResolvedRun automatic = resolve_run(config, 60000, 1);
  ASSERT_TRUE(automatic.schedule.adam_at(64).has_value());
  EXPECT_NEAR(automatic.schedule.adam_at(64)->beta1, 0.8, 1e-12);
  EXPECT_EQ(automatic.auto_batch->max_global_batch, 256);
  EXPECT_EQ(automatic.auto_batch_limit_note,
            "the last doubling before beta1 0.9 reaches 0 at 10x the rate's reference batch 32; "
            "--no-adam-sqrt-adjust lifts the limit");
  config.max_global_batch = 256;  // given: its own reason
  EXPECT_EQ(resolve_run(config, 60000, 1).auto_batch_limit_note, "");
  config.max_global_batch = 1024;
  try {
    resolve_run(config, 60000, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--max-global-batch 1024 is past the betas' range under --adam-sqrt-adjust (on "
                  "by default for adamw under --global-batch auto) (beta1 0.9 reaches 0"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("or add --no-adam-sqrt-adjust"), std::string::npos) << e.hint();
  }

  config.adam_sqrt_adjust = false;
  EXPECT_FALSE(config.adam_sqrt_adjust_on());
  automatic = resolve_run(config, 60000, 1);
  EXPECT_FALSE(automatic.schedule.adam_at(64).has_value());
  EXPECT_EQ(automatic.auto_batch->max_global_batch, 1024);
  EXPECT_EQ(automatic.auto_batch_limit_note, "");
  config.max_global_batch = 0;
  EXPECT_EQ(resolve_run(config, 60000, 1).auto_batch->max_global_batch, 64 * 32);

  // Elsewhere off: another rule, another optimizer, a fixed batch or a written ramp.
  config.adam_sqrt_adjust.reset();
  config.lr_scaling = LrScaling::Linear;
  EXPECT_FALSE(config.adam_sqrt_adjust_on());
  EXPECT_FALSE(resolve_run(config, 60000, 1).schedule.adam_at(64).has_value());
  config.lr_scaling = LrScaling::Auto;
  config.optimizer = OptimizerKind::Sgd;
  EXPECT_FALSE(config.adam_sqrt_adjust_on());
  config.optimizer = OptimizerKind::Lamb;
  EXPECT_FALSE(config.adam_sqrt_adjust_on());
  config.optimizer = OptimizerKind::AdamW;
  config.global_batch_auto = false;
  EXPECT_FALSE(config.adam_sqrt_adjust_on());
  config.global_batch_schedule = "0:32 20000s:256";
  EXPECT_FALSE(config.adam_sqrt_adjust_on());
  EXPECT_FALSE(resolve_run(config, 60000, 1).adam.has_value());
}

}  // namespace
}  // namespace bigbatch
