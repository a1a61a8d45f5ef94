#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace bigbatch {
namespace {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  // First outputs of Vigna's splitmix64.c for seed 1234567.
  SplitMix64 rng(1234567);
  EXPECT_EQ(rng.next(), 6457827717110365317ULL);
  EXPECT_EQ(rng.next(), 3203168211198807973ULL);
  EXPECT_EQ(rng.next(), 9817491932198370423ULL);
}

TEST(SplitMix64, BelowStaysInRangeAndCoversIt) {
  SplitMix64 rng(7);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 6000; ++i)
    ++counts[rng.below(6)];
  for (int c : counts)
    EXPECT_GT(c, 850);
}

TEST(EpochOrder, IsAPermutationFixedBySeedAndEpoch) {
  const auto a = epoch_order(42, 0, 1000, Shuffle::On);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_EQ(a, epoch_order(42, 0, 1000, Shuffle::On));
  EXPECT_NE(a, epoch_order(42, 1, 1000, Shuffle::On));
  EXPECT_NE(a, epoch_order(43, 0, 1000, Shuffle::On));
  EXPECT_NE(epoch_order(1, 2, 100, Shuffle::On), epoch_order(2, 1, 100, Shuffle::On));
}

TEST(EpochOrder, GoldenValuesSharedWithThePythonOracle) {
  // tests/python/bigbatch_oracle.py reproduces this order; if this changes, so must it
  // (and old runs would no longer resume to the same samples).
  const auto order = epoch_order(42, 0, 10, Shuffle::On);
  EXPECT_EQ(order, (std::vector<int64_t>{2, 3, 9, 7, 5, 8, 6, 4, 0, 1}));
}

TEST(EpochOrder, NoShuffleKeepsFileOrder) {
  const auto order = epoch_order(42, 5, 5, Shuffle::Off);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace bigbatch
