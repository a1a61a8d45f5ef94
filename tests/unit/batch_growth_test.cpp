// --global-batch auto: the goodput arithmetic against its closed form, the rule's limits, the
// update cost's calibration, and the schedule driven update by update on a problem whose noise
// scale is known exactly — where it must stop at the batch the closed form says, and where its
// decision log, replayed as a ramp, takes the same batches at the same rates.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "schedule/batch_growth.h"
#include "schedule/run_schedule.h"

namespace bigbatch {
namespace {

// Progress per second at batch b, up to a constant (schedule/batch_growth.h).
double goodput(double b, double noise, double cost) {
  return b / ((1 + b / noise) * (cost + b));
}

NoiseScaleSummary exact_noise(double value) {
  NoiseScaleSummary n;
  n.value = n.low = n.high = value;
  n.updates = 100;
  return n;
}

TEST(BatchGrowth, GoodputGainIsTheRatioOfTheModel) {
  for (const double b : {8.0, 64.0, 300.0, 4096.0}) {
    for (const double noise : {50.0, 1000.0}) {
      for (const double cost : {0.0, 3.0, 200.0}) {
        EXPECT_NEAR(goodput_gain(b, noise, cost),
                    goodput(2 * b, noise, cost) / goodput(b, noise, cost), 1e-12);
      }
    }
  }
}

TEST(BatchGrowth, FreeUpdatesNeverPayForABiggerBatch) {
  // Accumulation on one device with nothing paid per update: a bigger batch only costs samples.
  for (const double b : {1.0, 16.0, 1024.0})
    EXPECT_LT(goodput_gain(b, 1000, 0), 1);
}

TEST(BatchGrowth, DoublingPaysBelowTheOptimumAndNotPastIt) {
  const double noise = 2000, cost = 50;
  const double best = goodput_optimal_batch(noise, cost);  // sqrt(1e5) = 316.2
  EXPECT_NEAR(best, std::sqrt(1e5), 1e-9);
  EXPECT_GT(goodput_gain(best / 2 * 0.99, noise, cost), 1);
  EXPECT_LT(goodput_gain(best * 1.01, noise, cost), 1);
  // The optimum is where the derivative of the goodput vanishes.
  const double h = 1e-3;
  EXPECT_NEAR(goodput(best + h, noise, cost), goodput(best - h, noise, cost), 1e-12);
}

TEST(BatchGrowth, JudgeGrowsOnlyPastTheThresholdAtTheBandsLowEnd) {
  GrowthRule rule;
  rule.max_global_batch = 4096;
  rule.dataset_size = 60000;
  // noise 1000, cost 100: 128 -> 256 predicts 1.150x.
  BatchCheck check = judge_growth(rule, 128, exact_noise(1000), 100);
  EXPECT_TRUE(check.grow);
  EXPECT_EQ(check.proposed, 256);
  EXPECT_NEAR(check.goodput_gain, goodput(256, 1000, 100) / goodput(128, 1000, 100), 1e-12);
  EXPECT_NEAR(check.updates_factor, (1 + 1000.0 / 256) / (1 + 1000.0 / 128), 1e-12);
  EXPECT_NEAR(check.samples_factor, (1 + 256 / 1000.0) / (1 + 128 / 1000.0), 1e-12);
  // 256 -> 512 predicts 0.966x: it stays, and says why.
  check = judge_growth(rule, 256, exact_noise(1000), 100);
  EXPECT_FALSE(check.grow);
  EXPECT_NE(check.reason.find("0.966x the goodput, under the 1.050x"), std::string::npos);
  // The same estimate with a wide band: its low end decides.
  NoiseScaleSummary wide = exact_noise(1000);
  wide.low = 150;
  wide.high = 5000;
  EXPECT_FALSE(judge_growth(rule, 128, wide, 100).grow);
  wide.low = 0;
  EXPECT_NE(judge_growth(rule, 16, wide, 100).reason.find("too uncertain"), std::string::npos);
  // A higher threshold waits for more.
  rule.threshold = 0.2;
  EXPECT_FALSE(judge_growth(rule, 128, exact_noise(1000), 100).grow);
}

TEST(BatchGrowth, PredictedAtTheEstimateTheBandDoesNotHoldAProposalBack) {
  GrowthRule rule;
  rule.max_global_batch = 4096;
  rule.dataset_size = 60000;
  rule.predict_at = GrowthPrediction::Estimate;
  // The band reaches down to 0, yet the estimate (1000, cost 100: 1.150x) favours doubling.
  NoiseScaleSummary wide = exact_noise(1000);
  wide.low = 0;
  wide.high = std::numeric_limits<double>::infinity();
  BatchCheck check = judge_growth(rule, 128, wide, 100);
  EXPECT_TRUE(check.grow);
  EXPECT_EQ(check.predicted_at, GrowthPrediction::Estimate);
  EXPECT_NEAR(check.goodput_gain, goodput(256, 1000, 100) / goodput(128, 1000, 100), 1e-12);
  // The estimate still decides against a doubling past the optimum, band or no band.
  check = judge_growth(rule, 256, wide, 100);
  EXPECT_FALSE(check.grow);
  EXPECT_NE(check.reason.find("0.966x the goodput, under the 1.050x"), std::string::npos);
  // A check stopped by a limit still says where it would have predicted.
  rule.max_global_batch = 128;
  EXPECT_EQ(judge_growth(rule, 128, wide, 100).predicted_at, GrowthPrediction::Estimate);
  rule.max_global_batch = 4096;
  // An estimate that is not above 0 proposes nothing.
  wide.value = 0;
  check = judge_growth(rule, 128, wide, 100);
  EXPECT_FALSE(check.grow);
  EXPECT_EQ(check.goodput_gain, 0);
  EXPECT_NE(check.reason.find("estimate is not above 0"), std::string::npos);
  // At the low end (the default) the same band waits.
  rule.predict_at = GrowthPrediction::BandLow;
  wide.value = 1000;
  check = judge_growth(rule, 128, wide, 100);
  EXPECT_FALSE(check.grow);
  EXPECT_EQ(check.predicted_at, GrowthPrediction::BandLow);
  EXPECT_NE(check.reason.find("too uncertain"), std::string::npos);
}

TEST(BatchGrowth, JudgeKeepsToTheLimits) {
  GrowthRule rule;
  rule.max_global_batch = 128;
  rule.dataset_size = 1000;
  EXPECT_NE(judge_growth(rule, 128, exact_noise(1e6), 1e6).reason.find("--max-global-batch 128"),
            std::string::npos);
  rule.max_global_batch = 4096;
  EXPECT_NE(judge_growth(rule, 512, exact_noise(1e6), 1e6).reason.find("1000 training samples"),
            std::string::npos);
  rule.must_divide = true;
  EXPECT_NE(judge_growth(rule, 64, exact_noise(1e6), 1e6).reason.find("--strict-batch"),
            std::string::npos);
  rule.dataset_size = 1024;
  EXPECT_TRUE(judge_growth(rule, 64, exact_noise(1e6), 1e6).grow);
}

TEST(BatchGrowth, TheCostIsTimedAfterTheWarmupOverWholeWindows) {
  BatchGrowthState state;
  const UpdateTiming timing{64, /*gradient_seconds=*/0.64, /*update_seconds=*/0.05, true};
  EXPECT_FALSE(tally_update_cost(state, 1, {64, 9.0, 9.0, true}));  // warm-up: not counted
  EXPECT_FALSE(tally_update_cost(state, 2, {64, 9.0, 9.0, true}));
  EXPECT_FALSE(tally_update_cost(state, 3, {64, 9.0, 9.0, false}));  // a resumed window's rest
  for (int64_t step = 3; step < 3 + kCostCalibrationUpdates - 1; ++step)
    EXPECT_FALSE(tally_update_cost(state, step, timing));
  EXPECT_LT(state.update_cost, 0);
  EXPECT_TRUE(tally_update_cost(state, 3 + kCostCalibrationUpdates - 1, timing));
  // 0.05 s per update against 0.01 s per sample: an update costs 5 samples.
  EXPECT_NEAR(state.update_cost, 5.0, 1e-9);
  EXPECT_FALSE(tally_update_cost(state, 40, {64, 1.0, 100.0, true}));  // fixed once known
  EXPECT_NEAR(state.update_cost, 5.0, 1e-9);
}

TEST(BatchGrowth, TheLogReplaysAsARamp) {
  const std::vector<BatchDecision> log = {{40, 1280, 32, 64, 0, 0, 0, 0, 0},
                                          {60, 2560, 64, 128, 0, 0, 0, 0, 0}};
  EXPECT_EQ(replay_schedule(32, {}), "0:32");
  EXPECT_EQ(replay_schedule(32, log), "0:32 1280s:64 2560s:128");
  EXPECT_EQ(GlobalBatchSchedule::parse(replay_schedule(32, log)).to_string(),
            replay_schedule(32, log));
}

// --- The schedule, update by update -----------------------------------------------------------

constexpr int64_t kSamples = 100000;

LrSchedule constant_rate(double lr, int64_t reference) {
  LrScheduleConfig c;
  c.base_lr = lr;
  c.kind = ScheduleKind::Constant;
  c.reference_batch = reference;
  c.global_batch = reference;
  c.scaling = LrScaling::Linear;
  c.total_updates = 1000000;
  return LrSchedule(c);
}

// `test_budget` 1: the tests may throw away as many samples as are trained, so that the
// proposals are tested as soon as they come (the budget's own test sets it).
AutoBatchSchedule auto_from_32(double update_cost, bool branch_test = false, double test_budget = 1,
                               int64_t total_updates = 100000) {
  const BatchPlan plan = plan_for_ramp_step(32, 32, 1);
  GrowthRule rule;
  rule.max_global_batch = 4096;
  rule.dataset_size = kSamples;
  rule.update_cost = update_cost;
  rule.branch_test = branch_test;
  rule.test_budget = test_budget;
  return AutoBatchSchedule(plan, plan_epoch(plan, kSamples, LastWindow::Keep),
                           constant_rate(0.01, 32), RunBounds{1, total_updates},
                           /*reference_batch=*/32, rule);
}

// Exact squared norms of a problem whose |G|^2 and tr(Sigma) are known: every estimate is the
// truth, so the band is the value.
void measure(NoiseScaleTracker& noise, double batch, double gradient_sq, double trace) {
  const double small = batch / 2;
  noise.add({small, gradient_sq + trace / small, batch, gradient_sq + trace / batch});
}

struct Walk {
  TrainingProgress at;
  std::vector<int64_t> batches;  // per update
  std::vector<double> rates;
  std::vector<BatchCheck> checks;
};

// A branch test's verdict on a proposal (the fit loop trains both branches; here only the kept
// one is walked, which is what the run keeps).
using Verdict = std::function<bool(const BatchDecision&)>;

// `updates` updates of a run under `schedule`, the fit loop's order of calls.
Walk walk(RunSchedule& schedule, int64_t updates, double noise_scale, Walk from = {},
          const Verdict& verdict = nullptr) {
  NoiseScaleTracker noise;
  noise.restore(from.at.noise);
  Walk w = std::move(from);
  std::optional<BatchDecision> testing;
  int64_t test_ends = 0;
  for (int64_t i = 0; i < updates; ++i) {
    if (const auto proposal = schedule.proposal(w.at)) {
      testing = *proposal;
      test_ends = w.at.samples_seen + proposal->test_samples;
      schedule.enter_branch(w.at, verdict(*proposal) ? TestBranch::Doubled : TestBranch::Current);
    }
    schedule.plan_update(w.at);
    const int64_t global = schedule.plan().global_batch_size;
    measure(noise, double(global), 1.0, noise_scale);
    w.rates.push_back(schedule.rate(w.at, {global, &noise}).lr);
    w.batches.push_back(global);
    ++w.at.step;
    ++w.at.update_in_epoch;
    w.at.samples_seen += global;
    w.at.items_seen += global;
    w.at.position_in_epoch += global;
    w.at.global_batch = global;
    w.at.noise = noise.state();
    if (testing) {
      if (w.at.samples_seen == test_ends) {
        BatchTest test;
        test.proposal = *testing;
        test.kept = w.at.global_batch == testing->to_batch;
        schedule.settle(w.at, test);
        testing.reset();
      }
      continue;  // the loop does not check inside a test
    }
    if (auto check = schedule.observe(w.at, {{global, 0.1, 0.01, true}, &noise, nullptr}))
      w.checks.push_back(*check);
  }
  return w;
}

// The walk's decision log as the ramp that replays it, from 32.
RampSchedule replay_of(const Walk& w) {
  const BatchPlan plan = plan_for_ramp_step(32, 32, 1);
  return RampSchedule(plan, plan_epoch(plan, kSamples, LastWindow::Keep), constant_rate(0.01, 32),
                      RunBounds{1, 100000},
                      GlobalBatchSchedule::parse(replay_schedule(32, w.at.growth.decisions)), 32);
}

TEST(AutoBatchSchedule, GrowsToTheBatchTheGoodputModelPicks) {
  // B_noise 1000, an update worth 100 samples: the optimum is sqrt(1e5) = 316, so doubling
  // from 32 pays up to 256 and not to 512.
  AutoBatchSchedule schedule = auto_from_32(100);
  const Walk w = walk(schedule, 200, 1000);
  ASSERT_EQ(w.at.growth.decisions.size(), 3u);
  EXPECT_EQ(schedule.plan().global_batch_size, 256);
  EXPECT_EQ(schedule.plan().accumulation_steps, 8);  // the micro-batch stays
  EXPECT_EQ(w.at.growth.decisions[0].step, kGrowthCheckEvery);
  EXPECT_EQ(w.at.growth.decisions[0].samples_seen, 32 * kGrowthCheckEvery);
  EXPECT_NEAR(w.at.growth.decisions[0].noise_scale, 1000, 1e-6);
  EXPECT_FALSE(w.checks.back().grow);
  EXPECT_EQ(w.checks.back().proposed, 512);
  // The rate follows the linear rule from the reference batch of 32.
  EXPECT_NEAR(w.rates.back(), 0.01 * 256 / 32, 1e-15);
  const std::string summary = schedule.summary(w.at);
  EXPECT_NE(summary.find("32 -> 64 -> 128 -> 256"), std::string::npos) << summary;
  EXPECT_NE(summary.find("--global-batch-schedule \"0:32 640s:64 1920s:128 4480s:256\""),
            std::string::npos)
      << summary;
}

TEST(AutoBatchSchedule, StaysPutWhenUpdatesCostNothing) {
  AutoBatchSchedule schedule = auto_from_32(0);
  const Walk w = walk(schedule, 100, 1000);
  EXPECT_TRUE(w.at.growth.decisions.empty());
  EXPECT_EQ(schedule.plan().global_batch_size, 32);
  EXPECT_EQ(w.checks.size(), 5u);  // every kGrowthCheckEvery updates
  EXPECT_NE(schedule.summary(w.at).find("stayed at 32: doubling predicted"), std::string::npos);
}

TEST(AutoBatchSchedule, ItsLogReplaysAsTheSameRampAtTheSameRates) {
  AutoBatchSchedule grown = auto_from_32(100);
  const Walk w = walk(grown, 200, 1000);
  RampSchedule replay = replay_of(w);
  const Walk r = walk(replay, 200, 1000);
  EXPECT_EQ(r.batches, w.batches);
  EXPECT_EQ(r.rates, w.rates);
}

TEST(AutoBatchSchedule, AResumedRunContinuesTheSameDecisions) {
  AutoBatchSchedule whole = auto_from_32(100);
  const Walk uninterrupted = walk(whole, 200, 1000);
  // Stopped after 70 updates (past two doublings), restored into a fresh schedule.
  AutoBatchSchedule first = auto_from_32(100);
  const Walk before = walk(first, 70, 1000);
  AutoBatchSchedule resumed = auto_from_32(100);
  EXPECT_TRUE(resumed.restore(before.at));
  EXPECT_EQ(resumed.plan().global_batch_size, before.batches.back());
  const Walk after = walk(resumed, 130, 1000, before);
  EXPECT_EQ(after.batches, uninterrupted.batches);
  EXPECT_EQ(after.rates, uninterrupted.rates);
  EXPECT_EQ(after.at.growth.decisions.size(), uninterrupted.at.growth.decisions.size());
}

TEST(BatchGrowth, BranchesAreJudgedOnTheirShareOfTheProgress) {
  // Three samples with 2 items each, from 3 per item: the current branch reaches 12/6 = 2 (a
  // gain of 1), the doubled one 13/6 (5/6 of that gain).
  BranchLosses losses{{2, 4, 6}, {2.2, 4.2, 6.6}, 6, 3.0};
  BranchVerdict v = judge_branches(losses, 0.2);
  EXPECT_NEAR(v.start_loss, 3.0, 1e-12);
  EXPECT_NEAR(v.current_loss, 2.0, 1e-12);
  EXPECT_NEAR(v.doubled_loss, 13.0 / 6, 1e-12);
  EXPECT_NEAR(v.difference, 1.0 / 6, 1e-12);
  // Differences 0.2, 0.2, 0.6: mean 1/3, sample variance 4/75; over the items sqrt(3 x 4/75)/6.
  EXPECT_NEAR(v.standard_error, std::sqrt(3 * 4.0 / 75) / 6, 1e-12);
  EXPECT_NEAR(v.bound, 0.2, 1e-12);  // 20% of the current branch's gain of 1
  EXPECT_TRUE(v.keep);
  EXPECT_FALSE(judge_branches(losses, 0.1).keep);  // 5/6 of the progress < 90%
  // Asked to clear the bound by one standard error: 1/6 + 0.067 > 0.2.
  EXPECT_FALSE(judge_branches(losses, 0.2, 1).keep);
  EXPECT_TRUE(judge_branches(losses, 0.25, 1).keep);
  // No progress at the current batch: the doubled one must do at least as well.
  losses.start_loss = 1.5;
  EXPECT_EQ(judge_branches(losses, 0.5).bound, 0);
  EXPECT_FALSE(judge_branches(losses, 0.5).keep);
  // Better is kept at any tolerance; a loss that is not finite never is.
  EXPECT_TRUE(judge_branches({{2, 4, 6}, {1, 4, 6}, 6, 3}, 0).keep);
  EXPECT_FALSE(judge_branches({{2, 4, 6}, {2, std::nan(""), 6}, 6, 3}, 0.5).keep);
}

TEST(BatchGrowth, ABranchTestFitsInsideTheEpochAndRejectionsWaitLonger) {
  EXPECT_EQ(branch_test_samples(32, 100000), kBranchTestUpdates * 64);
  EXPECT_EQ(branch_test_samples(32, 200), 3 * 64);  // as many doubled updates as fit
  EXPECT_EQ(branch_test_samples(32, 127), 0);       // fewer than kFewestBranchTestUpdates
  EXPECT_EQ(growth_check_wait(0), kGrowthCheckEvery);
  EXPECT_EQ(growth_check_wait(2), 4 * kGrowthCheckEvery);
  EXPECT_EQ(growth_check_wait(100), kGrowthCheckEvery << kMostCooldownDoublings);
  EXPECT_EQ(default_growth_holdout(4096), 256);
  EXPECT_EQ(default_growth_holdout(55000), 1100);
  EXPECT_EQ(default_growth_holdout(1000000), 2048);
  EXPECT_EQ(default_growth_holdout(800), 200);  // a quarter at most
}

TEST(AutoBatchSchedule, ABranchTestDecidesEachProposal) {
  // The goodput model proposes 64, 128 and 256 (as above); the tests keep 64 and 128 and
  // reject 256, which then waits twice as long after each rejection.
  AutoBatchSchedule schedule = auto_from_32(100, /*branch_test=*/true);
  const Walk w =
      walk(schedule, 300, 1000, {}, [](const BatchDecision& p) { return p.to_batch <= 128; });
  ASSERT_EQ(w.at.growth.decisions.size(), 2u);
  EXPECT_EQ(schedule.plan().global_batch_size, 128);
  const BatchDecision& first = w.at.growth.decisions[0];
  EXPECT_EQ(first.step, kGrowthCheckEvery);
  EXPECT_EQ(first.samples_seen, 32 * kGrowthCheckEvery);
  EXPECT_EQ(first.test_samples, kBranchTestUpdates * 64);
  // The proposals were checks that did not grow at once but asked for a test.
  EXPECT_FALSE(w.checks[0].grow);
  EXPECT_EQ(w.checks[0].test_samples, kBranchTestUpdates * 64);
  ASSERT_GE(w.at.growth.tests.size(), 4u);
  EXPECT_TRUE(w.at.growth.tests[0].kept);
  EXPECT_TRUE(w.at.growth.tests[1].kept);
  EXPECT_FALSE(w.at.growth.tests[2].kept);
  EXPECT_FALSE(w.at.growth.tests[3].kept);
  // Each test of 256 trains 8 updates of 256 (16 of 128); the next check waits 40, then 80.
  const int64_t between = w.at.growth.tests[3].proposal.step - w.at.growth.tests[2].proposal.step;
  EXPECT_EQ(between, 2 * kBranchTestUpdates + 2 * kGrowthCheckEvery);
  EXPECT_EQ(w.at.growth.rejected_in_a_row, int64_t(w.at.growth.tests.size()) - 2);
  const std::string summary = schedule.summary(w.at);
  EXPECT_NE(summary.find("32 -> 64 -> 128"), std::string::npos) << summary;
  EXPECT_NE(summary.find("branch tests (2 kept)"), std::string::npos) << summary;
  // The kept branches replay as a ramp: the same batches at the same rates.
  RampSchedule replay = replay_of(w);
  const Walk r = walk(replay, 300, 1000);
  EXPECT_EQ(r.batches, w.batches);
  EXPECT_EQ(r.rates, w.rates);
}

TEST(BatchGrowth, TheTestsBudgetIsAFractionOfTheSamplesTrained) {
  // 512 thrown away may start once 512 / 0.05 = 10,240 are trained with the test's own branch.
  EXPECT_EQ(test_budget_allows_from(0.05, 0, 512, 512), 10240 - 512);
  EXPECT_EQ(test_budget_allows_from(0.1, 1024, 2048, 1024), 30720 - 1024);
  EXPECT_EQ(test_budget_allows_from(1, 0, 512, 512), 0);
  EXPECT_EQ(test_budget_allows_from(1e-300, 0, 512, 512), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(branch_test_worst_cost(GrowthControl::Rate, 512), 512);
  EXPECT_EQ(branch_test_worst_cost(GrowthControl::Temperature, 512), 1024);
  std::vector<BatchTest> tests(2);
  tests[0].proposal.test_samples = 512;
  tests[1].proposal.test_samples = 1024;
  tests[1].branches = 3;
  EXPECT_EQ(thrown_away_samples(tests), 512 + 2 * 1024);
}

TEST(AutoBatchSchedule, TestsWaitUntilTheirLosingBranchesFitTheBudget) {
  // Every test rejected: the run keeps proposing 64, and every test waits until, lost, it
  // keeps the tests' thrown-away samples within 5% of the samples trained.
  AutoBatchSchedule schedule = auto_from_32(100, /*branch_test=*/true, /*test_budget=*/0.05);
  const Walk w = walk(schedule, 3000, 1000, {}, [](const BatchDecision&) { return false; });
  ASSERT_GE(w.at.growth.tests.size(), 3u);
  EXPECT_TRUE(w.at.growth.decisions.empty());
  // The first proposal came at the first check past 9,728 samples, not at update 20.
  EXPECT_EQ(w.checks[0].test_samples, 0);
  EXPECT_NE(w.checks[0].reason.find("waits for the tests' budget: 5% of the samples trained, 0 "
                                    "thrown away so far; it fits from sample 9728"),
            std::string::npos)
      << w.checks[0].reason;
  const BatchDecision& first = w.at.growth.tests[0].proposal;
  EXPECT_GE(first.samples_seen, 9728);
  EXPECT_LT(first.samples_seen, 9728 + 32 * kGrowthCheckEvery);
  // At every test's end the losing branches are within the budget of what was trained.
  int64_t thrown = 0;
  for (const BatchTest& test : w.at.growth.tests) {
    thrown += test.proposal.test_samples;
    EXPECT_LE(double(thrown),
              0.05 * double(test.proposal.samples_seen + test.proposal.test_samples));
  }
  EXPECT_EQ(thrown, thrown_away_samples(w.at.growth.tests));
  // A run too short for its first test says so at its end, and what would let it test.
  AutoBatchSchedule short_run = auto_from_32(100, /*branch_test=*/true, /*test_budget=*/0.05);
  const Walk s = walk(short_run, 200, 1000);
  EXPECT_TRUE(s.at.growth.tests.empty());
  const std::string summary = short_run.summary(s.at);
  EXPECT_NE(summary.find("stayed at 32: doubling predicted"), std::string::npos) << summary;
  EXPECT_NE(
      summary.find("fits the tests' budget (5% of the samples trained) only from sample 9728"),
      std::string::npos)
      << summary;
}

TEST(BatchGrowth, ATestMustBeRepaidByTheRestOfTheRun) {
  // Kept at 1.5x the goodput, a doubling saves a third of what follows: 3 x 512 repays 512.
  EXPECT_EQ(samples_to_repay_test(1.5, 512), 1536);
  EXPECT_EQ(samples_to_repay_test(2, 1000), 2000);
  EXPECT_EQ(samples_to_repay_test(1.05, 1000), 21000);
  EXPECT_EQ(samples_to_repay_test(1, 512), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(samples_to_repay_test(1 + 1e-300, 512), std::numeric_limits<int64_t>::max());
}

TEST(AutoBatchSchedule, NoTestNearTheRunsEndThatCannotRepayItself) {
  // Update cost 100, noise scale 1000: doubling 32 predicts 1.561x the goodput, so a test of
  // 512 samples a branch needs ceil(512 x 1.561 / 0.561) = 1425 samples of run after it. The
  // first check comes after update 20 (640 samples).
  const double gain = goodput_gain(32, 1000, 100);
  const int64_t needed = samples_to_repay_test(gain, 512);
  ASSERT_EQ(needed, 1425);
  // A run of 70 updates has 50 x 32 = 1600 left at the check, 1088 after the test: not proposed.
  AutoBatchSchedule short_run = auto_from_32(100, /*branch_test=*/true, /*test_budget=*/1, 70);
  const Walk s = walk(short_run, 70, 1000);
  ASSERT_FALSE(s.checks.empty());
  EXPECT_EQ(s.checks[0].test_samples, 0);
  EXPECT_NE(s.checks[0].reason.find("testing 64 (512 samples a branch) cannot repay itself: 1.561x "
                                    "the goodput over the 1088 samples the run has left after it "
                                    "saves the compute of 391, less than the 512 a lost test "
                                    "throws away"),
            std::string::npos)
      << s.checks[0].reason;
  EXPECT_TRUE(s.at.growth.tests.empty());
  const std::string summary = short_run.summary(s.at);
  EXPECT_NE(summary.find("too few left after it to repay it"), std::string::npos) << summary;
  // A run of 36 updates ends with the test's 512 samples.
  AutoBatchSchedule ends = auto_from_32(100, /*branch_test=*/true, /*test_budget=*/1, 36);
  const Walk e = walk(ends, kGrowthCheckEvery, 1000);
  ASSERT_FALSE(e.checks.empty());
  EXPECT_EQ(e.checks[0].reason,
            "testing 64 (512 samples a branch) cannot repay itself: the run ends within it");
  // A run of 90 updates has 2240 left, 1728 after the test: proposed at the first check.
  AutoBatchSchedule long_enough = auto_from_32(100, /*branch_test=*/true, /*test_budget=*/1, 90);
  const Walk l = walk(long_enough, kGrowthCheckEvery, 1000);
  ASSERT_TRUE(long_enough.proposal(l.at).has_value());
  EXPECT_EQ(l.checks[0].test_samples, 512);
  // Over a whole run with every test lost, each test had enough run left to repay itself.
  AutoBatchSchedule whole = auto_from_32(100, /*branch_test=*/true, /*test_budget=*/1, 3125);
  const Walk w = walk(whole, 3125, 1000, {}, [](const BatchDecision&) { return false; });
  ASSERT_GE(w.at.growth.tests.size(), 3u);
  for (const BatchTest& test : w.at.growth.tests)
    EXPECT_GE(kSamples - test.proposal.samples_seen - test.proposal.test_samples, needed);
}

// --growth-control temperature: the control branch trains the current batch at the doubled
// batch's noise temperature (rate over batch), and only while it trains.
TEST(AutoBatchSchedule, TheControlBranchTrainsAtTheDoubledBatchsTemperature) {
  for (const LrScaling scaling : {LrScaling::Sqrt, LrScaling::Linear, LrScaling::None}) {
    const BatchPlan plan = plan_for_ramp_step(32, 32, 1);
    GrowthRule rule;
    rule.max_global_batch = 4096;
    rule.dataset_size = kSamples;
    rule.update_cost = 100;
    rule.control = GrowthControl::Temperature;
    rule.test_budget = 1;
    LrScheduleConfig c = constant_rate(0.01, 32).config();
    c.scaling = scaling;
    AutoBatchSchedule schedule(plan, plan_epoch(plan, kSamples, LastWindow::Keep), LrSchedule(c),
                               RunBounds{1, 100000}, /*reference_batch=*/32, rule);
    Walk w = walk(schedule, kGrowthCheckEvery, 1000);
    ASSERT_TRUE(schedule.proposal(w.at).has_value());
    const TrainingProgress start = w.at;
    NoiseScaleTracker noise;
    const auto rate_of = [&](const TrainingProgress& at) {
      return schedule.rate(at, {32, &noise}).lr;
    };
    const double own = rate_of(start);
    // The doubled batch's rate over its batch, at the current batch: its rate times the
    // doubling's factor over 2 (sqrt: 1/sqrt(2); linear: 1, the current branch itself; none: 1/2).
    const double expected = scaling == LrScaling::Sqrt     ? 1 / std::sqrt(2.0)
                            : scaling == LrScaling::Linear ? 1.0
                                                           : 0.5;
    TrainingProgress control = start;
    EXPECT_DOUBLE_EQ(schedule.enter_branch(control, TestBranch::Control), expected);
    EXPECT_DOUBLE_EQ(rate_of(control), own * expected);
    EXPECT_EQ(schedule.plan().global_batch_size, 32);
    EXPECT_FALSE(schedule.proposal(control).has_value());
    // Put back (a snapshot's restore) and the doubled branch: the schedule's own rates again.
    schedule.restore(start);
    EXPECT_DOUBLE_EQ(rate_of(start), own);
    TrainingProgress doubled = start;
    EXPECT_DOUBLE_EQ(schedule.enter_branch(doubled, TestBranch::Doubled), 1.0);
    schedule.plan_update(doubled);
    EXPECT_EQ(schedule.plan().global_batch_size, 64);
    EXPECT_DOUBLE_EQ(rate_of(doubled) / own, expected * 2);
    // A rejection settles on the current batch at its own rate.
    schedule.restore(start);
    TrainingProgress current = start;
    schedule.enter_branch(current, TestBranch::Control);
    BatchTest test;
    test.proposal = *schedule.proposal(start);
    test.control_rate_factor = expected;
    test.branches = 3;
    schedule.settle(current, test);
    EXPECT_DOUBLE_EQ(rate_of(current), own);
    EXPECT_NE(schedule.summary(current).find(
                  "trained " + std::to_string(2 * test.proposal.test_samples) + " samples more"),
              std::string::npos)
        << schedule.summary(current);
  }
}

TEST(AutoBatchSchedule, ATestNearTheEpochsEndWaits) {
  const BatchPlan plan = plan_for_ramp_step(32, 32, 1);
  GrowthRule rule;
  rule.max_global_batch = 4096;
  rule.dataset_size = 700;  // a check after 20 updates leaves 60 samples: no room for 2 x 64
  rule.update_cost = 100;
  rule.test_budget = 1;
  AutoBatchSchedule schedule(plan, plan_epoch(plan, 700, LastWindow::Keep), constant_rate(0.01, 32),
                             RunBounds{1, 100000}, 32, rule);
  const Walk w = walk(schedule, kGrowthCheckEvery, 1000);
  ASSERT_EQ(w.checks.size(), 1u);
  EXPECT_EQ(w.checks[0].test_samples, 0);
  EXPECT_NE(w.checks[0].reason.find("too few samples left"), std::string::npos);
  EXPECT_FALSE(schedule.proposal(w.at));
}

TEST(AutoBatchSchedule, ItsStatusSaysWhatItWaitsFor) {
  AutoBatchSchedule given = auto_from_32(100);
  const Walk w = walk(given, 5, 1000);
  EXPECT_EQ(given.status(w.at), "auto: check in 15");
  TrainingProgress at = w.at;
  at.growth.rejected_in_a_row = 2;  // a rejected test doubles the wait, twice
  at.growth.last_check_step = at.step;
  EXPECT_EQ(given.status(at), "auto: check in 80");
  at.growth.rejected_in_a_row = 0;
  at.growth.last_check_step = at.step - kGrowthCheckEvery - 3;  // due, but the noise not settled
  EXPECT_EQ(given.status(at), "auto: noise settling");
  at.growth.proposal = BatchDecision{};
  at.growth.proposal->to_batch = 64;
  EXPECT_EQ(given.status(at), "auto: testing 64");

  const BatchPlan plan = plan_for_ramp_step(32, 32, 1);
  GrowthRule rule;
  rule.max_global_batch = 4096;
  rule.dataset_size = kSamples;
  const auto schedule = [&](const GrowthRule& r) {
    return std::make_unique<AutoBatchSchedule>(plan, plan_epoch(plan, kSamples, LastWindow::Keep),
                                               constant_rate(0.01, 32), RunBounds{1, 100000}, 32,
                                               r);
  };
  EXPECT_EQ(schedule(rule)->status(TrainingProgress{}), "auto: timing updates");
  rule.max_global_batch = 32;
  EXPECT_EQ(schedule(rule)->status(TrainingProgress{}), "auto: at its limit");
  const FixedSchedule fixed(plan, plan_epoch(plan, kSamples, LastWindow::Keep),
                            constant_rate(0.01, 32), RunBounds{1, 100000});
  EXPECT_EQ(fixed.status(TrainingProgress{}), "");
}

TEST(AutoBatchSchedule, ADamagedLogIsNamed) {
  AutoBatchSchedule schedule = auto_from_32(100);
  Walk w = walk(schedule, 70, 1000);
  TrainingProgress damaged = w.at;
  damaged.growth.decisions[1].to_batch = 512;
  EXPECT_NE(schedule.inconsistency(damaged).find("progress.growth.decisions[1] goes 64 -> 512"),
            std::string::npos);
  damaged = w.at;
  damaged.growth.decisions[1].samples_seen = damaged.samples_seen + 1;
  EXPECT_NE(schedule.inconsistency(damaged).find("decisions[1] is at sample"), std::string::npos);
  AutoBatchSchedule fresh = auto_from_32(100);
  EXPECT_FALSE(fresh.restore(damaged));  // left for the trainer's check to name
  EXPECT_EQ(schedule.inconsistency(w.at), "");
}

}  // namespace
}  // namespace bigbatch
