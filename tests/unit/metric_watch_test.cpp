// --early-stop's and --keep-best's bookkeeping (stats/metric_watch.h) and the metric names they
// take (config/stop_target.h, WatchedMetric).
#include <gtest/gtest.h>

#include <cmath>

#include "config/stop_target.h"
#include "config/train_config.h"
#include "core/error.h"
#include "stats/metric_watch.h"

namespace bigbatch {
namespace {

TEST(MetricWatch, CountsEvaluationsSinceTheBestGoingDown) {
  MetricWatch watch;
  EXPECT_TRUE(watch.observe(0.9, 10, /*rises=*/false, 0));  // the first always improves
  EXPECT_TRUE(watch.observe(0.8, 20, false, 0));
  EXPECT_FALSE(watch.observe(0.8, 30, false, 0)) << "equal is no improvement";
  EXPECT_FALSE(watch.observe(0.85, 40, false, 0));
  EXPECT_EQ(watch.best, 0.8);
  EXPECT_EQ(watch.best_step, 20);
  EXPECT_EQ(watch.since_best, 2);
  EXPECT_TRUE(watch.observe(0.7, 50, false, 0));
  EXPECT_EQ(watch.since_best, 0);
}

TEST(MetricWatch, AccuracyImprovesGoingUpAndMinDeltaIsStrict) {
  MetricWatch watch;  // values exact in binary, so "by exactly min_delta" is exact
  watch.observe(0.25, 1, /*rises=*/true, 0.25);
  EXPECT_FALSE(watch.observe(0.375, 2, true, 0.25));
  EXPECT_FALSE(watch.observe(0.5, 3, true, 0.25)) << "by exactly min_delta: not more";
  EXPECT_TRUE(watch.observe(0.625, 4, true, 0.25));
  EXPECT_FALSE(watch.observe(0.125, 5, true, 0.25));
  EXPECT_EQ(watch.best_step, 4);
  EXPECT_EQ(watch.since_best, 1);
}

TEST(MetricWatch, AnEvaluationRecordedTwiceCountsOnce) {
  // A run that ends at an interval's evaluation records it again as its partial epoch.
  MetricWatch watch;
  watch.observe(0.5, 10, /*rises=*/false, 0);
  watch.observe(0.6, 20, false, 0);
  EXPECT_FALSE(watch.observe(0.6, 20, false, 0));
  EXPECT_EQ(watch.since_best, 1);
  EXPECT_EQ(watch.counted_step, 20);
}

TEST(MetricWatch, ANonFiniteValueNeverImproves) {
  MetricWatch watch;
  EXPECT_FALSE(watch.observe(std::nan(""), 1, false, 0));
  EXPECT_FALSE(watch.seen);
  EXPECT_EQ(watch.since_best, 1);
  EXPECT_TRUE(watch.observe(2.0, 2, false, 0));
  EXPECT_FALSE(watch.observe(INFINITY, 3, true, 0));
}

TEST(WatchedMetric, ParsesNamesWithOrWithoutTheirSplit) {
  const WatchedMetric loss = WatchedMetric::parse("val_loss", "--early-stop");
  EXPECT_EQ(loss.split, "val");
  EXPECT_EQ(loss.metric, "loss");
  EXPECT_FALSE(loss.rises());
  EXPECT_EQ(loss.name(), "val_loss");
  const WatchedMetric accuracy = WatchedMetric::parse(" accuracy ", "--keep-best");
  EXPECT_TRUE(accuracy.rises());
  EXPECT_EQ(accuracy.metric_in(/*has_validation=*/true), "val_accuracy");
  EXPECT_EQ(accuracy.metric_in(false), "test_accuracy");
  EXPECT_EQ(accuracy.name(), "accuracy");
  try {
    WatchedMetric::parse("val_lose", "--early-stop");
    FAIL() << "accepted val_lose";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--early-stop 'val_lose' names metric 'lose'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'loss'"), std::string::npos) << e.what();
  }
  // --target keeps its own forms and errors.
  EXPECT_EQ(StopTarget::parse("val_bpb<=1.9").to_string(), "val_bpb<=1.9");
  EXPECT_THROW(StopTarget::parse("val_loss>=0.3"), Error);
}

TEST(WatchedMetric, PatienceAndMinDeltaNeedEarlyStop) {
  TrainConfig config;
  config.patience = 5;
  EXPECT_THROW(config.validate(), Error);
  config.early_stop = "val_loss";
  EXPECT_NO_THROW(config.validate());
  config.patience = 0;
  EXPECT_THROW(config.validate(), Error);
  config.patience = 3;
  config.min_delta = -0.1;
  EXPECT_THROW(config.validate(), Error);
}

}  // namespace
}  // namespace bigbatch
