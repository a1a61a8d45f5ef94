// AdaScale's gain against ../shared/LARGE_BATCH.md's oracles (section 4 and oracle 8).
#include <gtest/gtest.h>

#include "schedule/adascale.h"

namespace bigbatch {
namespace {

TEST(AdaScale, GainMatchesTheWorkedOracle) {
  // S = 4, sigma^2 = 3, mu^2 = 1: r = (3 + 1) / (3/4 + 1) = 4 / 1.75.
  EXPECT_NEAR(adascale_gain_ratio(4, 3, 1), 4.0 / 1.75, 1e-12);
  EXPECT_NEAR(adascale_gain_ratio(4, 3, 1), 2.2857, 1e-4);
}

TEST(AdaScale, GainIsOneForAnExactGradientAndSForPureNoise) {
  EXPECT_DOUBLE_EQ(adascale_gain_ratio(8, 0, 2), 1);
  EXPECT_DOUBLE_EQ(adascale_gain_ratio(8, 5, 0), 8);
  // Early averages can go negative: they count as zero, never as a gain outside [1, S].
  EXPECT_DOUBLE_EQ(adascale_gain_ratio(8, 5, -1), 8);
  EXPECT_DOUBLE_EQ(adascale_gain_ratio(8, -5, 1), 1);
  for (double variance : {1e-6, 0.1, 1.0, 10.0, 1e6}) {
    for (double gradient_sq : {1e-6, 0.1, 1.0, 10.0}) {
      const double r = adascale_gain_ratio(16, variance, gradient_sq);
      EXPECT_GE(r, 1);
      EXPECT_LE(r, 16);
    }
  }
  // At scale 1 nothing changes, whatever the noise.
  EXPECT_DOUBLE_EQ(adascale_gain_ratio(1, 3, 1), 1);
}

TEST(AdaScale, GainInNoiseScaleTermsIsTheSameRatio) {
  // Per-example variance tr(Sigma) = 192 and |G|^2 = 1: B_noise = 192. At reference 64 and
  // batch 1024, sigma^2 = 192 / 64 = 3, S = 16, and r = (1 + 192/64) / (1 + 192/1024).
  const AdaScaleGain g = adascale_gain(1024, 64, 192, 1);
  EXPECT_DOUBLE_EQ(g.scale, 16);
  EXPECT_NEAR(g.gain, (1 + 192.0 / 64) / (1 + 192.0 / 1024), 1e-12);
  EXPECT_NEAR(g.gain, adascale_gain_ratio(16, 3, 1), 1e-12);
}

TEST(AdaScale, BelowTheReferenceTheGainShrinksTheRate) {
  const AdaScaleGain g = adascale_gain(32, 64, 192, 1);
  EXPECT_DOUBLE_EQ(g.scale, 0.5);
  EXPECT_GT(g.gain, 0.5);
  EXPECT_LT(g.gain, 1);
}

TEST(AdaScale, RunSummary) {
  EXPECT_EQ(describe_adascale_run(352, 943.059, 16),
            "AdaScale: 352 updates for 943.06 scale-invariant ones (mean gain 2.68 of S = 16)");
}

}  // namespace
}  // namespace bigbatch
