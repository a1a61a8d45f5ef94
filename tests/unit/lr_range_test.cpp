// The range test's reading: a curve with a known steepest point and a known divergence, read as
// Lightning's and fastai's lr_find read theirs; too short a curve is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "report/lr_range.h"

namespace bigbatch {
namespace {

// 100 rates from 1e-6 to 1; the loss falls as a logistic step in log10(rate) centred at
// `centre` (steepest there), then explodes past `explode`.
std::vector<LrRangePoint> curve(double centre, double explode) {
  std::vector<LrRangePoint> points;
  for (int i = 0; i < 100; ++i) {
    const double log_lr = -6 + 6.0 * i / 99;
    double loss = 1.0 + 1.0 / (1.0 + std::exp(4.0 * (log_lr - centre)));
    if (log_lr > explode)
      loss *= std::exp(8.0 * (log_lr - explode));
    points.push_back({std::pow(10.0, log_lr), loss});
  }
  return points;
}

TEST(LrRange, SuggestsTheSteepestDescentAndStopsAtDivergence) {
  const LrRangeReading reading = read_lr_range(curve(/*centre=*/-3, /*explode=*/-1));
  // The smoothing lags the curve by about 1 / (1 - 0.98) = 50 points at its start and less
  // once settled: the steepest smoothed descent lies a little past the raw one (1e-3).
  EXPECT_GT(reading.suggested_lr, 1e-3);
  EXPECT_LT(reading.suggested_lr, 1e-2);
  EXPECT_TRUE(reading.diverged);
  EXPECT_LT(reading.end, 100u);
  const double diverged_at = reading.smoothed[reading.end].lr;
  EXPECT_GT(diverged_at, 1e-1);  // the raw explosion begins at 1e-1
  EXPECT_GT(reading.smoothed[reading.end].loss, 4 * reading.smoothed[reading.lowest].loss);
  EXPECT_LE(reading.lowest, reading.end);
  EXPECT_NEAR(reading.lowest_lr_over_10, reading.smoothed[reading.lowest].lr / 10, 1e-15);
  EXPECT_LT(reading.steepest, reading.lowest);
}

TEST(LrRange, ACurveThatNeverDivergesIsReadToItsEnd) {
  const LrRangeReading reading = read_lr_range(curve(/*centre=*/-2, /*explode=*/10));
  EXPECT_FALSE(reading.diverged);
  EXPECT_EQ(reading.end, 100u);
  EXPECT_GT(reading.suggested_lr, 1e-2);
  EXPECT_LT(reading.suggested_lr, 1e-1);
}

TEST(LrRange, ACurveThatBarelyFallsSuggestsNothing) {
  // Issue 59 item 4: 1.437 -> 1.393 over six decades (3%), with noise: its steepest point
  // (7.1e-06 once) is noise, not a rate.
  std::vector<LrRangePoint> points;
  for (int i = 0; i < 100; ++i) {
    const double log_lr = -6 + 6.0 * i / 99;
    const double noise = 0.01 * std::sin(7.0 * i);
    points.push_back({std::pow(10.0, log_lr), 1.437 - 0.044 * i / 99 + noise});
  }
  const LrRangeReading flat = read_lr_range(points);
  EXPECT_FALSE(flat.fell_clearly);
  EXPECT_NEAR(flat.start_loss, 1.437 + 0.01 * std::sin(0.0), 1e-12);
  EXPECT_GT(flat.fall, 0.0);
  EXPECT_LT(flat.fall, kClearFall);
  // A curve that falls by a quarter and more is a reading.
  const LrRangeReading falls = read_lr_range(curve(/*centre=*/-3, /*explode=*/-1));
  EXPECT_TRUE(falls.fell_clearly);
  EXPECT_GT(falls.fall, 0.25);  // 2 towards 1, cut where it explodes
}

TEST(LrRange, NonFiniteLossesAreLeftOutAndTooFewPointsAreAnError) {
  std::vector<LrRangePoint> points = curve(-3, -1);
  points[40].loss = std::nan("");
  points[41].loss = INFINITY;
  EXPECT_EQ(read_lr_range(points).smoothed.size(), 98u);
  std::vector<LrRangePoint> few(points.begin(), points.begin() + 9);
  try {
    read_lr_range(few);
    FAIL() << "nine points were read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_NE(std::string(e.what()).find("9 update(s) with a finite loss"), std::string::npos);
  }
}

TEST(LrRange, ALossThatReachesZeroIsNotCalledDivergedAtOnce) {
  // A module's own loss may reach 0 or go below: "4x the lowest" means nothing there.
  std::vector<LrRangePoint> points;
  for (int i = 0; i < 50; ++i)
    points.push_back({std::pow(10.0, -6 + 0.1 * i), 1.0 - 0.05 * i});  // 1 down to -1.45
  const LrRangeReading reading = read_lr_range(points);
  EXPECT_FALSE(reading.diverged);
  EXPECT_EQ(reading.end, 50u);
}

}  // namespace
}  // namespace bigbatch
