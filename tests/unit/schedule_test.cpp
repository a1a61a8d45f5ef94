#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "schedule/interval.h"
#include "schedule/lr_schedule.h"

namespace bigbatch {
namespace {

LrScheduleConfig base(double lr, ScheduleKind kind, int64_t warmup, int64_t total) {
  LrScheduleConfig c;
  c.base_lr = lr;
  c.global_batch = 256;
  c.kind = kind;
  c.warmup_updates = warmup;
  c.total_updates = total;
  return c;
}

TEST(LrScaling, LinearAndSqrtRules) {
  EXPECT_DOUBLE_EQ(scale_lr(0.05, 64, 1024, LrScaling::Linear), 0.8);
  EXPECT_DOUBLE_EQ(scale_lr(0.05, 64, 1024, LrScaling::Sqrt), 0.2);
  EXPECT_DOUBLE_EQ(scale_lr(0.05, 64, 1024, LrScaling::None), 0.05);
  // The seed's example: 0.1 at 64 -> 0.2 at 128.
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 64, 128, LrScaling::Linear), 0.2);
  // Goyal et al.: 0.1 x kn / 256 -> 3.2 at 8k.
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 256, 8192, LrScaling::Linear), 3.2);
}

TEST(LrSchedule, DescribesTheResolvedRule) {
  LrScheduleConfig c = base(0.05, ScheduleKind::Constant, 0, 100);
  c.reference_batch = 64;
  c.global_batch = 1024;
  c.scaling = LrScaling::Linear;
  EXPECT_EQ(LrSchedule(c).describe_scaling(), "lr 0.05 @ 64 -> 0.8 @ 1024 (linear)");
}

TEST(LrSchedule, ReferenceBatchDefaultsToTheGlobalBatch) {
  LrScheduleConfig c = base(0.05, ScheduleKind::Constant, 0, 10);
  c.scaling = LrScaling::Linear;
  EXPECT_DOUBLE_EQ(LrSchedule(c).peak_lr(), 0.05);
}

TEST(LrSchedule, WarmupGoldenValues) {
  LrScheduleConfig c = base(0.4, ScheduleKind::Constant, 4, 100);
  const LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);  // never zero, even with start factor 0
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.2);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.30000000000000004);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 0.4);  // last warmup update trains at the peak
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.4);
}

TEST(LrSchedule, WarmupStartFactor) {
  LrScheduleConfig c = base(1.0, ScheduleKind::Constant, 10, 100);
  c.warmup_start_factor = 0.1;
  const LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.19);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
}

TEST(LrSchedule, CosineGoldenValues) {
  const LrSchedule s(base(1.0, ScheduleKind::Cosine, 0, 100));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_NEAR(s.lr_at(25), 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_NEAR(s.lr_at(50), 0.5, 1e-15);
  EXPECT_NEAR(s.lr_at(100), 0.0, 1e-15);
  EXPECT_NEAR(s.lr_at(500), 0.0, 1e-15);  // past the end: stays at the floor
}

TEST(LrSchedule, CosineStartsAfterWarmupAndEndsAtTheFloor) {
  LrScheduleConfig c = base(1.0, ScheduleKind::Cosine, 10, 110);
  c.min_lr_factor = 0.1;
  const LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-15);
  EXPECT_NEAR(s.lr_at(110), 0.1, 1e-15);
}

TEST(LrSchedule, LinearDecayGoldenValues) {
  LrScheduleConfig c = base(1.0, ScheduleKind::Linear, 0, 100);
  c.min_lr_factor = 0.1;
  const LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_NEAR(s.lr_at(50), 0.55, 1e-15);
  EXPECT_NEAR(s.lr_at(100), 0.1, 1e-15);
}

TEST(LrSchedule, StepDecayAtMilestones) {
  LrScheduleConfig c = base(1.0, ScheduleKind::Step, 0, 100);
  c.milestones = {30, 60};
  c.gamma = 0.1;
  const LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.lr_at(29), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(30), 0.1);
  EXPECT_NEAR(s.lr_at(60), 0.01, 1e-17);
}

TEST(LrSchedule, AdvisesWarmupPastTenTwentyFourWithTheLinearRule) {
  LrScheduleConfig c = base(0.1, ScheduleKind::Constant, 0, 100);
  c.scaling = LrScaling::Linear;
  c.layer_wise_trust = true;  // LARS: the linear rule is its own, only the warmup is advised
  c.reference_batch = 256;
  c.global_batch = 2048;
  ASSERT_EQ(LrSchedule(c).warnings().size(), 1u);
  EXPECT_NE(LrSchedule(c).warnings()[0].find("warmup"), std::string::npos);
  c.warmup_updates = 50;
  EXPECT_TRUE(LrSchedule(c).warnings().empty());
  c.warmup_updates = 0;
  c.global_batch = 1024;
  EXPECT_TRUE(LrSchedule(c).warnings().empty());
  // Nothing scaled (the rate was tuned at this batch, or no reference): no warning (issue 20).
  c.global_batch = 4096;
  c.reference_batch = 4096;
  EXPECT_TRUE(LrSchedule(c).warnings().empty());
  c.reference_batch = 0;
  EXPECT_TRUE(LrSchedule(c).warnings().empty());
}

TEST(LrSchedule, WarnsOfAWarmupAsLongAsTheRunAndAMilestonePastIt) {
  LrScheduleConfig c = base(0.1, ScheduleKind::Cosine, 100, 100);
  ASSERT_EQ(LrSchedule(c).warnings().size(), 1u);
  EXPECT_NE(LrSchedule(c).warnings()[0].find("never reaches its peak"), std::string::npos);
  c.warmup_updates = 99;
  EXPECT_TRUE(LrSchedule(c).warnings().empty());
  c = base(0.1, ScheduleKind::Step, 0, 100);
  c.milestones = {50, 100};
  ASSERT_EQ(LrSchedule(c).warnings().size(), 1u);
  EXPECT_NE(LrSchedule(c).warnings()[0].find("update 100 is past the run's 100 updates"),
            std::string::npos);
}

TEST(LrSchedule, RefusesMilestonesThatDoNotIncrease) {
  LrScheduleConfig c = base(0.1, ScheduleKind::Step, 0, 100);
  for (const auto& milestones : {std::vector<int64_t>{40, 16}, std::vector<int64_t>{30, 30}}) {
    c.milestones = milestones;
    try {
      LrSchedule schedule(c);
      ADD_FAILURE() << "accepted milestones that do not increase";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--step-milestones must increase"), std::string::npos);
    }
  }
}

TEST(LrSchedule, RejectsImpossibleSettings) {
  LrScheduleConfig c = base(-0.1, ScheduleKind::Constant, 0, 10);
  EXPECT_THROW(LrSchedule{c}, Error);
  c = base(0.1, ScheduleKind::Constant, 0, 10);
  c.warmup_start_factor = 1.5;
  EXPECT_THROW(LrSchedule{c}, Error);
}

TEST(LrSchedule, AutoRulePerOptimizer) {
  EXPECT_EQ(resolve_lr_scaling(LrScaling::Auto, /*layer_wise_trust=*/true), LrScaling::Linear);
  EXPECT_EQ(resolve_lr_scaling(LrScaling::Auto, /*layer_wise_trust=*/false), LrScaling::Sqrt);
  EXPECT_EQ(resolve_lr_scaling(LrScaling::None, true), LrScaling::None);
  EXPECT_EQ(resolve_lr_scaling(LrScaling::Linear, true), LrScaling::Linear);
}

TEST(LrSchedule, SquareRootRuleAdjustsAdam) {
  // LARGE_BATCH.md's oracle: kappa = 4, (1e-3, 0.9, 0.999, 1e-8) -> (2e-3, 0.6, 0.996, 5e-9).
  EXPECT_DOUBLE_EQ(scale_lr(1e-3, 256, 1024, LrScaling::Sqrt), 2e-3);
  const AdamHyperparameters scaled = scale_adam_hyperparameters({0.9, 0.999, 1e-8}, 4);
  EXPECT_NEAR(scaled.beta1, 0.6, 1e-12);
  EXPECT_NEAR(scaled.beta2, 0.996, 1e-12);
  EXPECT_NEAR(scaled.eps, 5e-9, 1e-20);
  // A batch 32x the reference would take beta1 0.9 below zero: an error naming it.
  try {
    scale_adam_hyperparameters({0.9, 0.999, 1e-8}, 32);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beta1 0.9 to -2.2"), std::string::npos) << e.what();
  }
}

TEST(LrSchedule, AdamsBetasFollowTheBatchFromTheReference) {
  LrScheduleConfig c;
  c.base_lr = 1e-3;
  c.reference_batch = 256;
  c.global_batch = 256;
  c.scaling = LrScaling::Sqrt;
  EXPECT_FALSE(LrSchedule(c).adam_at(1024).has_value());  // as configured without the adjustment
  c.adam_at_reference = AdamHyperparameters{0.9, 0.999, 1e-8};
  const LrSchedule schedule(c);
  const AdamHyperparameters at_1024 = *schedule.adam_at(1024);  // the oracle above, kappa 4
  EXPECT_NEAR(at_1024.beta1, 0.6, 1e-12);
  EXPECT_NEAR(at_1024.beta2, 0.996, 1e-12);
  EXPECT_NEAR(at_1024.eps, 5e-9, 1e-20);
  const AdamHyperparameters at_reference = *schedule.adam_at(256);
  EXPECT_EQ(at_reference.beta1, 0.9);  // kappa 1: exactly as configured
  EXPECT_EQ(at_reference.beta2, 0.999);
  EXPECT_EQ(at_reference.eps, 1e-8);
  EXPECT_NEAR(schedule.adam_at(128)->beta1, 0.95, 1e-12);  // a smaller batch averages longer
  EXPECT_EQ(describe(at_1024), "beta1 0.6, beta2 0.996, eps 5e-09");
  // beta1 0.9 reaches 0 at 10x: 2560 is the largest batch, 2561 is refused.
  EXPECT_EQ(largest_adam_adjusted_batch({0.9, 0.999, 1e-8}, 256), 2560);
  EXPECT_EQ(schedule.adam_at(2560)->beta1, 0);  // not 2.2e-16: 1 - 0.9 is inexact in binary
  EXPECT_THROW(schedule.adam_at(2561), Error);
  EXPECT_EQ(largest_adam_adjusted_batch({0.99, 0.95, 1e-8}, 32), 640);  // beta2 binds: 20x
  EXPECT_EQ(scale_adam_hyperparameters({0.99, 0.95, 1e-8}, 20).beta2, 0);
  EXPECT_EQ(largest_adam_adjusted_batch({0.9, 0.999, 1e-8}, 32), 320);
  EXPECT_EQ(largest_adam_adjusted_batch({0.0, 0.999, 1e-8}, 32), 32);
}

TEST(LrSchedule, NamesParse) {
  EXPECT_EQ(schedule_kind_names().parse("cosine"), ScheduleKind::Cosine);
  EXPECT_EQ(lr_scaling_names().parse("sqrt"), LrScaling::Sqrt);
  EXPECT_EQ(lr_scaling_names().parse("auto"), LrScaling::Auto);
  EXPECT_THROW(schedule_kind_names().parse("exponential"), Error);
  EXPECT_THROW(lr_scaling_names().parse("quadratic"), Error);
}

class IntervalTest : public ::testing::Test {
 protected:
  // Fashion-MNIST at 256: 234 full updates and one of 96 samples.
  BatchPlan plan_ = [] {
    BatchRequest r;
    r.global_batch_size = 256;
    r.micro_batch_size = 32;
    return BatchPlan::resolve(r);
  }();
  EpochPlan epoch_ = plan_epoch(plan_, 60000, LastWindow::Keep);
};

TEST_F(IntervalTest, ConvertsEveryUnitThroughThePlan) {
  ASSERT_EQ(epoch_.updates_per_epoch, 235);
  EXPECT_EQ(Interval::parse("500u").to_updates(plan_, epoch_), 500);
  EXPECT_EQ(Interval::parse("3e").to_updates(plan_, epoch_), 705);
  EXPECT_EQ(Interval::parse("0.5e").to_updates(plan_, epoch_), 118);  // rounded up
  EXPECT_EQ(Interval::parse("120000s").to_updates(plan_, epoch_), 470);
  EXPECT_EQ(Interval::parse("256s").to_updates(plan_, epoch_), 1);
  EXPECT_EQ(Interval::parse("257s").to_updates(plan_, epoch_), 2);
  EXPECT_EQ(Interval::parse("0").to_updates(plan_, epoch_), 0);
}

TEST_F(IntervalTest, TokensConvertThroughTheMeanTokensPerSample) {
  // Packed blocks of 256 tokens: 1M tokens are 3907 samples (rounded up), 16 updates of 256.
  const EpochPlan tokens = plan_epoch(plan_, 60000, LastWindow::Keep, /*items_per_sample=*/256);
  EXPECT_EQ(Interval::parse("1Mt").unit(), Interval::Unit::Tokens);
  EXPECT_EQ(Interval::parse("1Mt").to_updates(plan_, tokens), 16);
  EXPECT_EQ(Interval::parse("65536t").to_updates(plan_, tokens), 1);  // exactly one update
  EXPECT_EQ(Interval::parse("65537t").to_updates(plan_, tokens), 2);
  // Beyond an epoch (60000 x 256 tokens): whole epochs, then the rest.
  EXPECT_EQ(Interval::parse("15360001t").to_updates(plan_, tokens), 236);
  // Documents of 97.5 tokens on average: 1000 tokens are 11 samples, one update.
  const EpochPlan documents = plan_epoch(plan_, 60000, LastWindow::Keep, 97.5);
  EXPECT_EQ(Interval::parse("1kt").to_updates(plan_, documents), 1);
  // Images have no tokens to count.
  try {
    Interval::parse("4Mt").to_updates(plan_, epoch_);
    ADD_FAILURE() << "tokens converted on images";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("counts tokens"), std::string::npos);
  }
}

TEST_F(IntervalTest, HugeEpochCountsAreErrorsNotOverflows) {
  EXPECT_THROW(Interval::parse("1e14e").to_updates(plan_, epoch_), Error);
}

TEST_F(IntervalTest, SiPrefixes) {
  EXPECT_DOUBLE_EQ(Interval::parse("1.2Ms").value(), 1.2e6);
  EXPECT_DOUBLE_EQ(Interval::parse("50ku").value(), 50000);
  EXPECT_EQ(Interval::parse("1.2Ms").unit(), Interval::Unit::Samples);
}

TEST_F(IntervalTest, RoundTripsThroughText) {
  for (const char* text : {"500u", "2e", "0.5e", "120000s", "4000000t"}) {
    EXPECT_EQ(Interval::parse(text).to_string(), text);
  }
}

TEST_F(IntervalTest, RejectsBadText) {
  for (const char* text : {"", "12", "u", "2.5u", "-1e", "3E", "abc", "1x", "1.5s", "e5u", "1e300u",
                           "2e16s", "0.5t", "2e16t"}) {
    EXPECT_THROW(Interval::parse(text), Error) << text;
  }
}

TEST_F(IntervalTest, ADurationIsSaidToBeOneNotUnitless) {
  // Issue 36: "--warmup 30min" was "has no unit"; minutes are a unit, of time, which intervals
  // do not count in (only --checkpoint-every takes them).
  const auto message = [](const char* text) {
    try {
      Interval::parse(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message("30min").find("is a duration"), std::string::npos) << message("30min");
  EXPECT_NE(message("1.5h").find("is a duration"), std::string::npos);
  EXPECT_NE(message("12").find("has no unit"), std::string::npos);
  EXPECT_NE(message("5x").find("has no unit ('x' is not one)"), std::string::npos) << message("5x");
}

TEST(Cadence, AmountsOfTrainingOrWallClockTime) {
  EXPECT_EQ(Cadence::parse("200u").amount->to_string(), "200u");
  EXPECT_EQ(Cadence::parse("1e").amount->unit(), Interval::Unit::Epochs);
  EXPECT_DOUBLE_EQ(Cadence::parse("30min").seconds, 1800);
  EXPECT_DOUBLE_EQ(Cadence::parse("1.5h").seconds, 5400);
  EXPECT_EQ(Cadence::parse("30min").to_string(), "30min");
  EXPECT_EQ(Cadence::parse("40micro").micro_steps, 40);
  EXPECT_EQ(Cadence::parse("40micro").to_string(), "40micro");
  EXPECT_THROW(Cadence::parse("0micro"), Error);
  EXPECT_THROW(Cadence::parse("2.5micro"), Error);
  EXPECT_FALSE(Cadence{}.is_set());
  for (const char* text : {"0u", "0", "-5min", "min", "h", "10", "3 hours"}) {
    EXPECT_THROW(Cadence::parse(text), Error) << text;
  }
}

}  // namespace
}  // namespace bigbatch
