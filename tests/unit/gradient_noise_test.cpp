// The gradient noise scale's estimators against the oracles of ../shared/LARGE_BATCH.md and a
// synthetic linear regression whose gradient covariance is known in closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "stats/gradient_noise.h"

namespace bigbatch {
namespace {

TEST(GradientNoise, EstimatorsMatchTheWorkedOracle) {
  // Per-example gradients [1, 3]: B_small = 1 (mean squared norm 5), B_big = 2 (|mean|^2 = 4).
  const NoiseEstimate e = estimate_noise({1, 5, 2, 4});
  EXPECT_DOUBLE_EQ(e.trace, 2);        // Bessel-corrected sample variance
  EXPECT_DOUBLE_EQ(e.gradient_sq, 3);  // |G|^2 with the variance's share removed
}

TEST(GradientNoise, TrackerSmoothsEachEstimateAndDebiases) {
  NoiseScaleTracker tracker(0.9);
  EXPECT_FALSE(tracker.noise_scale().has_value());
  tracker.add({1, 5, 2, 4});
  // One sample: the bias-corrected averages are the sample itself.
  EXPECT_NEAR(tracker.trace(), 2, 1e-12);
  EXPECT_NEAR(tracker.gradient_sq(), 3, 1e-12);
  EXPECT_NEAR(*tracker.noise_scale(), 2.0 / 3.0, 1e-12);
  // A negative |G|^2 estimate (noise) is averaged, not trusted alone.
  NoiseScaleTracker noisy;
  noisy.add({1, 1, 2, 4});  // |G|^2 = 7, tr = -6
  EXPECT_FALSE(noisy.noise_scale().has_value());
  // The state survives a checkpoint.
  NoiseScaleTracker resumed(0.9);
  resumed.restore(tracker.state());
  EXPECT_EQ(*resumed.noise_scale(), *tracker.noise_scale());
}

TEST(GradientNoise, MemoryIsCountedInSamples) {
  // Two estimates, tr 2 / |G|^2 3 and then tr 10 / |G|^2 3 ({1, 13, 2, 8}).
  const NoiseSample first{1, 5, 2, 4};
  const NoiseSample second{1, 13, 2, 8};
  ASSERT_DOUBLE_EQ(estimate_noise(second).trace, 10);
  // At the first measured batch an update decays the averages by beta, exactly as an update
  // without a batch given (a fixed batch's runs are unchanged).
  NoiseScaleTracker fixed(0.9);
  NoiseScaleTracker unsized(0.9);
  fixed.add(first, 32);
  fixed.add(second, 32);
  unsized.add(first);
  unsized.add(second);
  EXPECT_EQ(fixed.trace(), unsized.trace());
  EXPECT_EQ(fixed.state().weight, unsized.state().weight);
  EXPECT_EQ(fixed.state().memory_batch, 32);
  // An update of twice the batch holds twice the samples: it decays them as two updates of 32
  // would (beta^2 = 0.81), so the memory spans the same samples as the batch grows.
  NoiseScaleTracker grown(0.9);
  grown.add(first, 32);
  grown.add(second, 64);
  const double kept = 0.81 * 0.1;  // the first estimate's weight after the second update
  const double added = 1 - 0.81;
  EXPECT_NEAR(grown.state().weight, kept + added, 1e-12);
  EXPECT_NEAR(grown.trace(), (kept * 2 + added * 10) / (kept + added), 1e-12);
  EXPECT_NEAR(grown.state().weight_sq, 0.81 * 0.81 * 0.01 + added * added, 1e-12);
}

TEST(GradientNoise, MatchesTheAnalyticNoiseScaleOfALinearRegression) {
  // Loss (w.x - y)^2 / 2 with x ~ N(0, I_n), y = w*.x + eps, eps ~ N(0, s^2). At w = w* + d the
  // per-example gradient g = x x^T d - eps x has mean G = d and (Isserlis) covariance
  // Sigma = d d^T + (|d|^2 + s^2) I, so B_simple = tr(Sigma) / |G|^2 = 1 + n (1 + s^2 / |d|^2).
  constexpr int n = 10;
  const double s2 = 1.0;
  std::vector<double> d(n, 0.0);
  d[0] = 0.6;
  d[1] = 0.8;                                      // |d| = 1
  const double analytic = 1 + n * (1 + s2 / 1.0);  // 21

  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto mean_gradient = [&](int batch) {
    std::vector<double> sum(n, 0.0);
    std::vector<double> x(n);
    for (int i = 0; i < batch; ++i) {
      double dot = 0;
      for (int j = 0; j < n; ++j) {
        x[j] = normal(rng);
        dot += x[j] * d[j];
      }
      const double residual = dot - std::sqrt(s2) * normal(rng);
      for (int j = 0; j < n; ++j)
        sum[j] += residual * x[j];
    }
    for (double& v : sum)
      v /= batch;
    return sum;
  };
  auto sq_norm = [](const std::vector<double>& v) {
    double total = 0;
    for (double x : v)
      total += x * x;
    return total;
  };

  // As the engine sees it: a micro-batch of 32 nested in an update of 256 (8 x 32).
  auto train = [&](NoiseScaleTracker& t, int updates) {
    for (int update = 0; update < updates; ++update) {
      const auto first = mean_gradient(32);
      const auto rest = mean_gradient(224);
      std::vector<double> whole(n);
      for (int j = 0; j < n; ++j)
        whole[j] = (32 * first[j] + 224 * rest[j]) / 256;
      t.add({32, sq_norm(first), 256, sq_norm(whole)});
    }
  };
  NoiseScaleTracker tracker(0.999);
  train(tracker, 4000);
  std::printf("noise scale %.3f (analytic %.1f), |G|^2 %.4f (analytic 1)\n", *tracker.noise_scale(),
              analytic, tracker.gradient_sq());
  // Stated tolerance: 10% (about four standard errors of this many averaged updates).
  EXPECT_NEAR(*tracker.noise_scale(), analytic, 0.10 * analytic);
  EXPECT_NEAR(tracker.gradient_sq(), 1.0, 0.15);
  // The reported range covers the true value and is narrow enough to judge by.
  const auto summary = tracker.summary();
  ASSERT_TRUE(summary.has_value());
  std::printf("two standard errors: %.2f-%.2f, run average %.2f\n", summary->low, summary->high,
              summary->run_average);
  EXPECT_LT(summary->low, analytic);
  EXPECT_GT(summary->high, analytic);
  EXPECT_LT(summary->high / summary->low, 1.6);
  EXPECT_NEAR(summary->run_average, analytic, 0.10 * analytic);  // a stationary problem
  EXPECT_EQ(summary->updates, 4000);

  // Twenty updates of the same problem cannot pin it down as well: a wider range.
  NoiseScaleTracker young;
  train(young, 20);
  const auto early = young.summary();
  ASSERT_TRUE(early.has_value());
  EXPECT_GT(early->high / early->low, 1.5 * summary->high / summary->low);
}

TEST(GradientNoise, AnEstimateWhoseGradientIsLostInItsNoiseIsTooNoisyToJudge) {
  // |G|^2 estimates that scatter far around a small mean: the average is positive but not
  // clearly above zero, so the noise scale has no upper bound.
  NoiseScaleTracker tracker;
  for (int i = 0; i < 40; ++i) {
    const double gradient_sq = (i % 2 == 0 ? 1.0 : -0.9);
    // Choose the squared norms that give these estimates (B_small 32, B_big 256), tr = 50.
    const double big_sq = gradient_sq + 50.0 / 256;
    const double small_sq = gradient_sq + 50.0 / 32;
    tracker.add({32, small_sq, 256, big_sq});
  }
  const auto summary = tracker.summary();
  ASSERT_TRUE(summary.has_value());
  EXPECT_TRUE(std::isinf(summary->high));
  const std::string verdict = critical_batch_verdict(256, *summary);
  EXPECT_NE(verdict.find("too noisy to judge whether"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("at least"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("is well below or near the critical batch"), std::string::npos) << verdict;
  EXPECT_EQ(verdict.find("minimum updates"), std::string::npos) << verdict;
  // A range from 0 to infinity judges nothing, however small the batch.
  NoiseScaleSummary unbounded;
  unbounded.value = 100;
  unbounded.low = 0;
  unbounded.high = std::numeric_limits<double>::infinity();
  unbounded.updates = 50;
  const std::string none = critical_batch_verdict(8, unbounded);
  EXPECT_NE(none.find("too noisy to judge"), std::string::npos) << none;
  EXPECT_NE(none.find("unbounded within two standard errors"), std::string::npos) << none;
  // A run resumed from a checkpoint without the spread: the value, but no range or average.
  NoiseScaleState old = tracker.state();
  old.spread_samples = 0;
  NoiseScaleTracker from_old;
  from_old.restore(old);
  EXPECT_EQ(from_old.summary()->high, 0);
  EXPECT_EQ(from_old.summary()->run_average, 0);
  EXPECT_EQ(critical_batch_verdict(256, *from_old.summary()).find("standard errors"),
            std::string::npos);
  // A resumed run continues the same estimate, spread included.
  NoiseScaleTracker resumed;
  resumed.restore(tracker.state());
  EXPECT_EQ(resumed.summary()->low, summary->low);
  // A settled, steady estimate says its range and the run's average.
  NoiseScaleTracker steady;
  for (int i = 0; i < 100; ++i) {
    const double gradient_sq = 1.0 + 0.01 * (i % 3);
    steady.add({32, gradient_sq + 50.0 / 32, 256, gradient_sq + 50.0 / 256});
  }
  const std::string settled = critical_batch_verdict(128, *steady.summary());
  EXPECT_NE(settled.find("within two standard errors"), std::string::npos) << settled;
  EXPECT_NE(settled.find("averaged over the run"), std::string::npos) << settled;
  EXPECT_NE(settled.find("near the measured critical batch"), std::string::npos) << settled;
}

TEST(GradientNoise, TradeoffAndVerdict) {
  const BatchTradeoff at_noise = batch_tradeoff(1000, 1000);
  EXPECT_DOUBLE_EQ(at_noise.steps_factor, 2);
  EXPECT_DOUBLE_EQ(at_noise.samples_factor, 2);
  // (S/S_min - 1)(E/E_min - 1) = 1 for any batch.
  for (double batch : {16.0, 256.0, 4096.0}) {
    const BatchTradeoff t = batch_tradeoff(batch, 700);
    EXPECT_NEAR((t.steps_factor - 1) * (t.samples_factor - 1), 1, 1e-12);
  }
  EXPECT_NE(critical_batch_verdict(64, 2000, 100).find("well below"), std::string::npos);
  EXPECT_NE(critical_batch_verdict(1024, 2000, 100).find("near"), std::string::npos);
  EXPECT_NE(critical_batch_verdict(65536, 2000, 100).find("far above"), std::string::npos);
  // A language model counts tokens on both sides.
  const std::string tokens = critical_batch_verdict(16384, 2e6, 100, "tokens");
  EXPECT_NE(tokens.find("global batch of 16.4k tokens"), std::string::npos) << tokens;
  EXPECT_NE(tokens.find("B_noise ~ 2.0M tokens"), std::string::npos) << tokens;
  EXPECT_NE(tokens.find("minimum tokens"), std::string::npos) << tokens;
  // Too few updates: no verdict.
  const std::string early = critical_batch_verdict(64, 1, 12);
  EXPECT_NE(early.find("too few to judge"), std::string::npos) << early;
  EXPECT_EQ(early.find("below"), std::string::npos) << early;
  // Below one sample of noise: no factor of infinity, a plain statement.
  const std::string none = critical_batch_verdict(384, 1e-9, 100, "tokens");
  EXPECT_NE(none.find("under one token"), std::string::npos) << none;
  EXPECT_EQ(none.find("inf"), std::string::npos) << none;
}

}  // namespace
}  // namespace bigbatch
