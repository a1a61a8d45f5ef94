#include "stats/loss_spikes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace bigbatch {
namespace {

TEST(LossSpikes, NoVerdictBeforeEnoughUpdates) {
  std::vector<double> recent;
  for (size_t i = 0; i + 1 < kLossesBeforeSpikeGuard; ++i)
    remember_applied_loss(recent, 1.0);
  EXPECT_EQ(recent_loss_median(recent), 0);
  EXPECT_FALSE(is_loss_spike(recent, 1e6, 10));
  remember_applied_loss(recent, 1.0);
  EXPECT_EQ(recent_loss_median(recent), 1.0);
  EXPECT_TRUE(is_loss_spike(recent, 1e6, 10));
}

TEST(LossSpikes, ComparesWithTheMedianOfTheLastApplied) {
  std::vector<double> recent;
  // A falling loss with one outlier: the median ignores the outlier.
  for (int i = 0; i < 40; ++i)
    remember_applied_loss(recent, i == 30 ? 100.0 : 2.0 - 0.01 * i);
  ASSERT_EQ(recent.size(), kRecentLosses);
  EXPECT_DOUBLE_EQ(recent.front(), 2.0 - 0.01 * 8);  // the oldest 8 were dropped
  const double median = recent_loss_median(recent);
  // Even count: the mean of the middle two (i = 23 and 22; the outlier at i = 30 sorts last).
  EXPECT_NEAR(median, 2.0 - 0.01 * 22.5, 1e-12);
  EXPECT_FALSE(is_loss_spike(recent, 10 * median, 10));  // not above: equal
  EXPECT_TRUE(is_loss_spike(recent, 10 * median * 1.001, 10));
  EXPECT_FALSE(is_loss_spike(recent, 10 * median * 1.001, 0));  // factor 0: off
  EXPECT_TRUE(is_loss_spike(recent, 3 * median, 2.5));
}

TEST(LossSpikes, NonFiniteAndSignedLossesAreLeftToTheirOwnChecks) {
  std::vector<double> recent(16, 1.0);
  // Non-finite updates are skipped as such, not as spikes.
  EXPECT_FALSE(is_loss_spike(recent, std::numeric_limits<double>::infinity(), 10));
  EXPECT_FALSE(is_loss_spike(recent, std::nan(""), 10));
  // A loss that can be negative (a user's log-likelihood) has no scale for a ratio.
  recent[3] = -0.5;
  EXPECT_EQ(recent_loss_median(recent), 0);
  EXPECT_FALSE(is_loss_spike(recent, 1e9, 10));
  recent[3] = 0;
  EXPECT_FALSE(is_loss_spike(recent, 1e9, 10));
}

}  // namespace
}  // namespace bigbatch
