#include "stats/prediction_counts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace bigbatch {
namespace {

int64_t count(const std::vector<float>& logits, int64_t classes,
              const std::vector<int64_t>& targets) {
  return count_correct_predictions(logits.data(), static_cast<int64_t>(targets.size()), classes,
                                   targets.data());
}

TEST(PredictionCountsTest, CountsRowsWhoseLargestLogitIsTheTarget) {
  const std::vector<float> logits = {0.1F,  2.0F,  -1.0F,   // predicts 1
                                     3.0F,  2.0F,  1.0F,    // predicts 0
                                     -5.0F, -4.0F, -3.0F};  // predicts 2
  EXPECT_EQ(count(logits, 3, {1, 0, 2}), 3);
  EXPECT_EQ(count(logits, 3, {1, 1, 1}), 1);
  EXPECT_EQ(count(logits, 3, {0, 2, 0}), 0);
}

TEST(PredictionCountsTest, TiesGoToTheFirstMaximumAsInTorchArgmax) {
  const std::vector<float> logits = {1.0F, 7.0F, 7.0F, 7.0F};
  EXPECT_EQ(count(logits, 4, {1}), 1);
  EXPECT_EQ(count(logits, 4, {2}), 0);
  EXPECT_EQ(count({0.0F, -0.0F}, 2, {0}), 1);  // equal values, whatever the sign bit
}

TEST(PredictionCountsTest, NanIsLargerThanAnyNumberAsInTorchArgmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(count({1.0F, nan, inf, nan}, 4, {1}), 1);  // the first NaN
  EXPECT_EQ(count({nan, 9.0F}, 2, {0}), 1);
  EXPECT_EQ(count({-inf, -inf, -inf}, 3, {0}), 1);
  EXPECT_EQ(count({-inf, inf, 3.0F}, 3, {1}), 1);
}

TEST(PredictionCountsTest, OneClassAndNoRows) {
  EXPECT_EQ(count({4.0F, -2.0F}, 1, {0, 0}), 2);
  EXPECT_EQ(count_correct_predictions(nullptr, 0, 10, nullptr), 0);
}

}  // namespace
}  // namespace bigbatch
