#include "dist/parameter_owners.h"

#include <gtest/gtest.h>

namespace bigbatch {
namespace {

TEST(ParameterOwners, LargestFirstToTheLightestRank) {
  // 100 to rank 0; 60 to rank 1; 10 to rank 1 (70 < 100).
  const ParameterOwners owners = assign_parameter_owners({100, 10, 60}, 2);
  EXPECT_EQ(owners.owner, (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(owners.values_per_rank, (std::vector<int64_t>{100, 70}));
  EXPECT_EQ(owners.tensors_per_rank, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(owners.describe(),
            "rank 0: 1 tensor, 100 values (58.8%); rank 1: 2 tensors, 70 values (41.2%)");
}

TEST(ParameterOwners, TiesGoToTheLowerRankAndTheEarlierParameter) {
  // A layer's weight and bias pairs: the equal weights alternate, the first to rank 0.
  const ParameterOwners owners = assign_parameter_owners({64, 8, 64, 8}, 2);
  EXPECT_EQ(owners.owner, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(owners.imbalance(), 1.0);
}

TEST(ParameterOwners, MoreRanksThanParametersLeaveSomeRanksNothing) {
  const ParameterOwners owners = assign_parameter_owners({5, 3}, 4);
  EXPECT_EQ(owners.owner, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(owners.values_per_rank, (std::vector<int64_t>{5, 3, 0, 0}));
  EXPECT_DOUBLE_EQ(owners.imbalance(), 5.0 * 4 / 8);
}

TEST(ParameterOwners, OneRankOwnsEverything) {
  const ParameterOwners owners = assign_parameter_owners({7, 9, 1}, 1);
  EXPECT_EQ(owners.owner, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(owners.values_per_rank, (std::vector<int64_t>{17}));
}

TEST(ParameterOwners, TheSameShapesGiveTheSameOwnersEveryTime) {
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < 50; ++i)
    sizes.push_back((i * 37) % 11 * 100 + 1);
  const ParameterOwners first = assign_parameter_owners(sizes, 4);
  EXPECT_EQ(first.owner, assign_parameter_owners(sizes, 4).owner);
  EXPECT_LT(first.imbalance(), 1.1);
}

}  // namespace
}  // namespace bigbatch
