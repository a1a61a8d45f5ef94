// Batch-size ramp-up: parsing, thresholds in samples and epochs, the simulated phases, windows
// that start anywhere in an epoch, and the rate that follows the rule with a curve in samples.
#include <gtest/gtest.h>

#include <cmath>

#include "config/resolved_run.h"
#include "core/error.h"
#include "schedule/batch_schedule.h"
#include "schedule/run_schedule.h"

namespace bigbatch {
namespace {

std::string error_of(const std::string& text) {
  try {
    GlobalBatchSchedule::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GlobalBatchSchedule, ParsesStepsAndRoundTrips) {
  const auto s = GlobalBatchSchedule::parse("0:256 200000s:1024, 1e6s:4096  3e:8192");
  ASSERT_EQ(s.steps().size(), 4u);
  EXPECT_EQ(s.steps()[1].global_batch, 1024);
  EXPECT_EQ(s.steps()[2].at.value(), 1e6);
  EXPECT_EQ(s.steps()[3].at.unit(), Interval::Unit::Epochs);
  EXPECT_EQ(s.to_string(), "0:256 200000s:1024 1000000s:4096 3e:8192");
  EXPECT_EQ(GlobalBatchSchedule::parse(s.to_string()).to_string(), s.to_string());
}

TEST(GlobalBatchSchedule, BadStepsNameTheStep) {
  EXPECT_NE(error_of("0:256 1000s").find("'1000s' has no ':'"), std::string::npos);
  EXPECT_NE(error_of("0:256 100u:512").find("counts updates"), std::string::npos);
  EXPECT_NE(error_of("0:256 1Mt:512").find("counts tokens"), std::string::npos);
  EXPECT_NE(error_of("1000s:256").find("first step must be at 0"), std::string::npos);
  EXPECT_NE(error_of("0:256 5000s:512 4000s:1024").find("thresholds must increase"),
            std::string::npos);
  EXPECT_NE(error_of("0:256 0:512").find("thresholds must increase"), std::string::npos);
  EXPECT_NE(error_of("0:0").find("positive whole global batch"), std::string::npos);
  EXPECT_NE(error_of("0:big").find("positive whole global batch"), std::string::npos);
  EXPECT_NE(error_of("  ").find("no steps"), std::string::npos);
  EXPECT_NE(error_of("0:256 12:512").find("has no unit"), std::string::npos);
}

TEST(GlobalBatchSchedule, SampleThresholdsCountSamplesEpochThresholdsCountTheOrder) {
  const auto s = GlobalBatchSchedule::parse("0:100 300s:200 2e:500");
  EXPECT_EQ(s.global_batch_at({0, 0, 0}, 1000), 100);
  EXPECT_EQ(s.global_batch_at({299, 0, 299}, 1000), 100);
  EXPECT_EQ(s.global_batch_at({300, 0, 300}, 1000), 200);
  // Two epochs of which --last-window drop used 1800 samples: the third starts at 2e exactly.
  EXPECT_EQ(s.global_batch_at({1800, 1, 900}, 1000), 200);
  EXPECT_EQ(s.global_batch_at({1800, 2, 0}, 1000), 500);
  EXPECT_EQ(GlobalBatchSchedule::parse("0:100 1.5e:200").global_batch_at({1500, 1, 500}, 1000),
            200);
}

// The rate a ramp's update at `global` trains at after `samples_seen` samples: the run's schedule
// put where a checkpoint of such an update would leave it.
double ramp_rate(const ResolvedRun& run, int64_t samples_seen, int64_t global) {
  const auto schedule = make_run_schedule(run);
  TrainingProgress at;
  at.samples_seen = samples_seen;
  at.global_batch = global;
  schedule->restore(at);
  return schedule->rate(at, {}).lr;
}

BatchPlan plan_of(int64_t global) {
  return plan_for_ramp_step(global, /*micro=*/50, /*world=*/1);
}

TEST(GlobalBatchSchedule, SimulatedPhasesByHand) {
  const auto s = GlobalBatchSchedule::parse("0:100 300s:200 2e:500");
  // Epoch 1: three updates of 100, then 200 from sample 300: 300, 500, 700 and a short 100 at
  // 900. Epoch 2: five of 200. Epoch 3 (2e reached): two of 500.
  auto phases = simulate_ramp(s, plan_of, 1000, LastWindow::Keep, 3, 1000);
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[0].global_batch, 100);
  EXPECT_EQ(phases[0].accumulation_steps, 2);
  EXPECT_EQ(phases[0].updates, 3);
  EXPECT_EQ(phases[0].samples, 300);
  EXPECT_EQ(phases[1].first_update, 3);
  EXPECT_EQ(phases[1].updates, 9);
  EXPECT_EQ(phases[1].samples, 1700);
  EXPECT_EQ(phases[1].short_windows, 1);
  EXPECT_EQ(phases[2].first_update, 12);
  EXPECT_EQ(phases[2].updates, 2);
  EXPECT_EQ(phases[2].accumulation_steps, 10);
  // Dropping: epoch 1 ends at 900 (100 left < 200).
  phases = simulate_ramp(s, plan_of, 1000, LastWindow::Drop, 3, 1000);
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[1].updates, 8);
  EXPECT_EQ(phases[1].samples, 1600);
  EXPECT_EQ(phases[1].short_windows, 0);
  // --max-updates cuts the walk.
  phases = simulate_ramp(s, plan_of, 1000, LastWindow::Keep, 3, 5);
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[1].updates, 2);
}

TEST(WindowAt, StartsAnywhereAndAgreesWithTheFixedPlan) {
  BatchRequest request;
  request.global_batch_size = 96;
  request.micro_batch_size = 20;
  request.world_size = 2;
  const BatchPlan plan = BatchPlan::resolve(request);
  for (LastWindow policy : {LastWindow::Keep, LastWindow::Drop}) {
    const EpochPlan epoch = plan_epoch(plan, 1000, policy);
    for (int64_t u = 0; u < epoch.updates_per_epoch; ++u) {
      for (int64_t rank = 0; rank < 2; ++rank) {
        const UpdateWindow a = window_for_update(plan, epoch, u, rank);
        const UpdateWindow b = window_at(plan, 1000, policy, u * 96, rank);
        EXPECT_EQ(a.rank_begin, b.rank_begin);
        EXPECT_EQ(a.micro_batch_sizes, b.micro_batch_sizes);
      }
    }
  }
  EXPECT_EQ(window_at(plan, 1000, LastWindow::Keep, 950, 0).size, 50);
  EXPECT_EQ(window_at(plan, 1000, LastWindow::Drop, 950, 0).size, 0);
  EXPECT_EQ(window_at(plan, 1000, LastWindow::Keep, 1000, 0).size, 0);
  EXPECT_EQ(window_at(plan, 1000, LastWindow::Keep, 7, 1).rank_begin, 7 + 48);
}

TEST(LrSchedule, FractionalPositionsFollowTheSameCurve) {
  LrScheduleConfig c;
  c.base_lr = 0.1;
  c.global_batch = 64;
  c.kind = ScheduleKind::Cosine;
  c.warmup_updates = 10;
  c.total_updates = 110;
  const LrSchedule s(c);
  for (int64_t step : {0, 5, 9, 10, 60, 109, 200})
    EXPECT_DOUBLE_EQ(s.lr_at_position(double(step)), s.lr_at(step));
  EXPECT_GT(s.lr_at_position(4.5), s.lr_at(4));
  EXPECT_LT(s.lr_at_position(4.5), s.lr_at(5));
  EXPECT_DOUBLE_EQ(s.lr_at_position(9.5), 0.1);  // the warmup's end is the peak, never above
  c.kind = ScheduleKind::Step;
  c.milestones = {20, 40};
  const LrSchedule step(c);
  EXPECT_DOUBLE_EQ(step.lr_at_position(19.99), 0.1);
  EXPECT_NEAR(step.lr_at_position(20.0), 0.01, 1e-15);
}

TEST(ResolvedRun, RampFollowsTheRuleWithACurveInSamples) {
  TrainConfig config;
  config.global_batch_schedule = "0:256 20000s:1024";
  config.micro_batch = 64;
  config.lr = 0.1;
  config.epochs = 2;
  config.schedule = ScheduleKind::Cosine;
  config.lr_scaling = LrScaling::Linear;
  const ResolvedRun run = resolve_run(config, 60000, 1);
  ASSERT_TRUE(run.ramp.has_value());
  EXPECT_EQ(run.plan.global_batch_size, 256);
  EXPECT_EQ(run.ramp->reference_batch, 256);  // the first step's batch unless --lr-ref-batch
  ASSERT_EQ(run.ramp->phases.size(), 2u);
  EXPECT_EQ(run.ramp->phases[0].updates, 79);  // 78 x 256 = 19968 < 20000 <= 79 x 256
  EXPECT_EQ(run.ramp->total_samples, 120000);
  EXPECT_EQ(run.total_updates, run.ramp->phases[0].updates + run.ramp->phases[1].updates);
  EXPECT_EQ(run.schedule.config().total_updates, (120000 + 255) / 256);
  // The curve counts samples / 256; the peak is linear in the batch.
  const double half = 0.5 * 120000;
  EXPECT_NEAR(ramp_rate(run, int64_t(half), 1024),
              0.4 * 0.5 * (1 + std::cos(M_PI * (half / 256) / 469)), 1e-12);
  EXPECT_DOUBLE_EQ(ramp_rate(run, 0, 256), 0.1);
  // Continuity at a switch: the curve's position is the same on both sides, only the rule's
  // factor changes — and with --lr-scaling none (Smith et al.'s recipe) nothing changes.
  const int64_t at_switch = 79 * 256;
  EXPECT_DOUBLE_EQ(ramp_rate(run, at_switch, 1024), 4 * ramp_rate(run, at_switch, 256));
  config.lr_scaling = LrScaling::None;
  const ResolvedRun constant = resolve_run(config, 60000, 1);
  EXPECT_DOUBLE_EQ(ramp_rate(constant, at_switch, 1024), ramp_rate(constant, at_switch, 256));
  // The next update moves along the cosine by 4 reference updates at most: 0.1 x pi/2 x 4/469.
  EXPECT_NEAR(ramp_rate(constant, at_switch + 1024, 1024), ramp_rate(constant, at_switch, 256),
              0.1 * M_PI / 2 * 4 / 469);
}

TEST(ResolvedRun, RampRefusesWhatItSetsItself) {
  TrainConfig config;
  config.global_batch_schedule = "0:256 20000s:1024";
  config.global_batch = 256;
  EXPECT_THROW(config.validate(), Error);
  config.global_batch.reset();
  config.accum_steps = 4;
  EXPECT_THROW(config.validate(), Error);
  config.accum_steps.reset();
  config.lr_scaling = LrScaling::AdaScale;
  EXPECT_THROW(config.validate(), Error);
  EXPECT_THROW(resolve_run(config, 60000, 1), Error);  // `bigbatch plan` refuses it too
  config.lr_scaling = LrScaling::Linear;
  config.micro_batch = 100;  // 256 is not whole micro-batches for 1 rank: fine (uneven); 1000:
  config.global_batch_schedule = "0:256 1e:50";  // a step below the micro-batch is not
  EXPECT_THROW(resolve_run(config, 60000, 1), Error);
}

}  // namespace
}  // namespace bigbatch
