#include "batching/batch_plan.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "core/error.h"

namespace bigbatch {
namespace {

BatchPlan resolve(std::optional<int64_t> global, std::optional<int64_t> micro,
                  std::optional<int64_t> accum, int64_t world = 1) {
  BatchRequest r;
  r.global_batch_size = global;
  r.micro_batch_size = micro;
  r.accumulation_steps = accum;
  r.world_size = world;
  return BatchPlan::resolve(r);
}

std::string plan_error(std::optional<int64_t> global, std::optional<int64_t> micro,
                       std::optional<int64_t> accum, int64_t world = 1) {
  try {
    resolve(global, micro, accum, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Plan);
    return e.what();
  }
  ADD_FAILURE() << "expected a plan error";
  return {};
}

TEST(BatchPlan, SeedExampleTenTimesFiveOnAThousandSamples) {
  const BatchPlan plan = resolve(std::nullopt, 10, 5);
  EXPECT_EQ(plan.global_batch_size, 50);
  EXPECT_EQ(plan.derived, "global_batch_size");
  const EpochPlan epoch = plan_epoch(plan, 1000, LastWindow::Keep);
  EXPECT_EQ(epoch.micro_steps_per_epoch, 100);
  EXPECT_EQ(epoch.updates_per_epoch, 20);
  EXPECT_EQ(epoch.samples_per_epoch, 1000);
  EXPECT_EQ(epoch.last_window_size, 0);
}

TEST(BatchPlan, DerivesAccumulationFromGlobalAndMicro) {
  const BatchPlan plan = resolve(1024, 64, std::nullopt);
  EXPECT_EQ(plan.accumulation_steps, 16);
  EXPECT_EQ(plan.derived, "accumulation_steps");
  EXPECT_EQ(plan.describe(), "1024 = micro 64 x accumulation 16 x world 1");
}

TEST(BatchPlan, DerivesMicroFromGlobalAndAccumulation) {
  const BatchPlan plan = resolve(256, std::nullopt, 8);
  EXPECT_EQ(plan.micro_batch_size, 32);
  EXPECT_EQ(plan.derived, "micro_batch_size");
}

TEST(BatchPlan, DefaultsToTwoFiveSixAsThirtyTwoTimesEight) {
  const BatchPlan plan = resolve(std::nullopt, std::nullopt, std::nullopt);
  EXPECT_EQ(plan.global_batch_size, 256);
  EXPECT_EQ(plan.micro_batch_size, 32);
  EXPECT_EQ(plan.accumulation_steps, 8);
}

TEST(BatchPlan, OneGivenSizeFillsTheOtherFromDefaults) {
  EXPECT_EQ(resolve(std::nullopt, 64, std::nullopt).accumulation_steps, 4);
  EXPECT_EQ(resolve(1024, std::nullopt, std::nullopt).accumulation_steps, 32);
  EXPECT_EQ(resolve(std::nullopt, std::nullopt, 4).micro_batch_size, 64);
}

TEST(BatchPlan, TheDefaultMicroBatchNeverExceedsARanksShare) {
  // Nobody asked for 32: a smaller global batch is one micro-batch per rank, not a refusal.
  const BatchPlan two_ranks = resolve(50, std::nullopt, std::nullopt, 2);
  EXPECT_EQ(two_ranks.micro_batch_size, 25);
  EXPECT_EQ(two_ranks.accumulation_steps, 1);
  EXPECT_EQ(resolve(8, std::nullopt, std::nullopt).micro_batch_size, 8);
  // A micro-batch the user gave is theirs: still refused.
  EXPECT_THROW(resolve(8, 16, std::nullopt), Error);
}

TEST(BatchPlan, WorldSizeKeepsTheGlobalBatch) {
  const BatchPlan one = resolve(1024, 32, std::nullopt, 1);
  const BatchPlan four = resolve(1024, 32, std::nullopt, 4);
  EXPECT_EQ(one.accumulation_steps, 32);
  EXPECT_EQ(four.accumulation_steps, 8);
  EXPECT_EQ(four.global_batch_size, 1024);
}

TEST(BatchPlan, InconsistentTripleNamesAllValuesAndTheFix) {
  const std::string message = plan_error(256, 32, 4);
  EXPECT_NE(message.find("global batch 256 != micro 32 x accumulation 4 x world 1 = 128"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("--accum-steps 8"), std::string::npos) << message;
}

TEST(BatchPlan, NonPositiveSizesAreErrors) {
  EXPECT_NE(
      plan_error(0, 32, std::nullopt).find("--global-batch must be a positive integer, got 0"),
      std::string::npos);
  EXPECT_NE(
      plan_error(256, -4, std::nullopt).find("--micro-batch must be a positive integer, got -4"),
      std::string::npos);
  EXPECT_NE(plan_error(256, std::nullopt, 0).find("--accum-steps"), std::string::npos);
  EXPECT_NE(plan_error(256, 32, std::nullopt, 0).find("world size"), std::string::npos);
}

TEST(BatchPlan, IndivisibleGlobalBatchSuggestsNearestChoices) {
  const std::string message = plan_error(1000, std::nullopt, 64);
  EXPECT_NE(message.find("not divisible"), std::string::npos) << message;
  EXPECT_NE(message.find("--global-batch 960 or --global-batch 1024"), std::string::npos)
      << message;
  EXPECT_NE(message.find("--accum-steps 50 or --accum-steps 100"), std::string::npos) << message;
}

TEST(BatchPlan, MicroBatchNeedNotDivideThePerRankBatch) {
  const BatchPlan plan = resolve(1000, 64, std::nullopt);
  EXPECT_EQ(plan.accumulation_steps, 16);
  EXPECT_EQ(plan.per_rank_batch_size(), 1000);
  EXPECT_EQ(plan.last_micro_batch_size(), 40);
  EXPECT_TRUE(plan.has_uneven_micro_batches());
  EXPECT_NE(plan.describe().find("last micro-batch: 40"), std::string::npos) << plan.describe();
  // The three sizes given together are consistent in the same way.
  EXPECT_EQ(resolve(1000, 64, 16).last_micro_batch_size(), 40);
  EXPECT_NE(plan_error(1000, 64, 15).find("or use --accum-steps 16"), std::string::npos);

  // Every window then covers its samples with micro-batches of 64 and one of 40, on each rank.
  const BatchPlan two = resolve(1000, 64, std::nullopt, 2);
  EXPECT_EQ(two.accumulation_steps, 8);
  EXPECT_EQ(two.last_micro_batch_size(), 52);
  const EpochPlan epoch = plan_epoch(two, 3000, LastWindow::Keep);
  EXPECT_EQ(epoch.micro_steps_per_epoch, 3 * 8);
  const UpdateWindow w = window_for_update(two, epoch, 1, 1);
  EXPECT_EQ(w.rank_begin, 1500);
  EXPECT_EQ(w.micro_batch_sizes, (std::vector<int64_t>{64, 64, 64, 64, 64, 64, 64, 52}));

  EXPECT_FALSE(resolve(256, 32, std::nullopt).has_uneven_micro_batches());
  // The back-off's halving keeps the global batch whatever the remainder.
  const BatchPlan halved = resolve(1000, 64, std::nullopt).with_micro_batch(32);
  EXPECT_EQ(halved.global_batch_size, 1000);
  EXPECT_EQ(halved.accumulation_steps, 32);
  EXPECT_EQ(halved.last_micro_batch_size(), 8);
  EXPECT_NE(plan_error(256, 512, std::nullopt)
                .find("micro batch 512 is larger than the per-rank "
                      "batch 256"),
            std::string::npos);
}

TEST(BatchPlan, AbsurdSizesAreErrorsNotOverflows) {
  EXPECT_NE(plan_error(std::nullopt, int64_t{1} << 40, 4).find("too large"), std::string::npos);
  EXPECT_NE(
      plan_error(std::nullopt, int64_t{1} << 30, int64_t{1} << 30).find("too large a global batch"),
      std::string::npos);
  EXPECT_NE(plan_error(256, 32, std::nullopt, int64_t{1} << 40).find("up to 2^20"),
            std::string::npos);
}

TEST(BatchPlan, IndivisibleAcrossRanksIsAnError) {
  const std::string message = plan_error(1000, 10, std::nullopt, 3);
  EXPECT_NE(message.find("not divisible by world 3"), std::string::npos) << message;
  EXPECT_NE(message.find("--global-batch 999 or --global-batch 1002"), std::string::npos)
      << message;
}

TEST(EpochPlan, MicroBatchLargerThanDatasetIsAnError) {
  const BatchPlan plan = resolve(std::nullopt, 64, 1);
  try {
    plan_epoch(plan, 50, LastWindow::Keep);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("micro batch 64 is larger than the dataset (50 samples)"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("--micro-batch 50"), std::string::npos);
  }
}

TEST(EpochPlan, ShortFinalWindowIsKeptWithItsTrueSize) {
  const BatchPlan plan = resolve(256, 32, std::nullopt);
  const EpochPlan epoch = plan_epoch(plan, 1000, LastWindow::Keep);
  EXPECT_EQ(epoch.full_updates, 3);
  EXPECT_EQ(epoch.last_window_size, 232);
  EXPECT_EQ(epoch.updates_per_epoch, 4);
  EXPECT_EQ(epoch.micro_steps_per_epoch, 3 * 8 + 8);  // 232 = 7 x 32 + 8
  const UpdateWindow last = window_for_update(plan, epoch, 3, 0);
  EXPECT_EQ(last.begin, 768);
  EXPECT_EQ(last.size, 232);
  ASSERT_EQ(last.micro_batch_sizes.size(), 8u);
  EXPECT_EQ(last.micro_batch_sizes.back(), 8);
}

TEST(EpochPlan, DropPolicySkipsTheRemainder) {
  const BatchPlan plan = resolve(256, 32, std::nullopt);
  const EpochPlan epoch = plan_epoch(plan, 1000, LastWindow::Drop);
  EXPECT_EQ(epoch.updates_per_epoch, 3);
  EXPECT_EQ(epoch.dropped_samples, 232);
  EXPECT_EQ(epoch.samples_per_epoch, 768);
  EXPECT_EQ(epoch.micro_steps_per_epoch, 24);
  EXPECT_FALSE(epoch.warnings.empty());
}

TEST(EpochPlan, DropWithBatchLargerThanDataLeavesNothingAndIsAnError) {
  const BatchPlan plan = resolve(2048, 32, std::nullopt);
  EXPECT_THROW(plan_epoch(plan, 1000, LastWindow::Drop), Error);
  const EpochPlan kept = plan_epoch(plan, 1000, LastWindow::Keep);
  EXPECT_EQ(kept.updates_per_epoch, 1);
  EXPECT_FALSE(kept.warnings.empty());
}

TEST(EpochPlan, ShortWindowIsSharedEvenlyAcrossRanks) {
  const BatchPlan plan = resolve(256, 32, std::nullopt, 2);  // accumulation 4
  const EpochPlan epoch = plan_epoch(plan, 1001, LastWindow::Keep);
  EXPECT_EQ(epoch.last_window_size, 233);
  const UpdateWindow rank0 = window_for_update(plan, epoch, 3, 0);
  const UpdateWindow rank1 = window_for_update(plan, epoch, 3, 1);
  EXPECT_EQ(rank0.rank_size, 117);
  EXPECT_EQ(rank1.rank_size, 116);
  EXPECT_EQ(rank1.rank_begin, 768 + 117);
  EXPECT_EQ(epoch.micro_steps_per_epoch, 3 * 4 + 4);
}

// Invariant 1 of docs/design.md: every factorisation of one global batch covers exactly the
// same positions in each update.
TEST(EpochPlan, EveryFactorisationCoversTheSamePositionsPerUpdate) {
  const int64_t dataset = 1000;
  std::vector<std::tuple<int64_t, int64_t, int64_t>> factorisations = {
      {256, 1, 1}, {32, 8, 1}, {64, 4, 1}, {32, 2, 4}, {16, 4, 4}, {128, 1, 2}};
  std::vector<std::vector<std::set<int64_t>>> coverage;
  for (const auto& [micro, accum, world] : factorisations) {
    const BatchPlan plan = resolve(std::nullopt, micro, accum, world);
    ASSERT_EQ(plan.global_batch_size, 256);
    const EpochPlan epoch = plan_epoch(plan, dataset, LastWindow::Keep);
    std::vector<std::set<int64_t>> per_update;
    for (int64_t u = 0; u < epoch.updates_per_epoch; ++u) {
      std::set<int64_t> positions;
      for (int64_t rank = 0; rank < world; ++rank) {
        const UpdateWindow w = window_for_update(plan, epoch, u, rank);
        int64_t position = w.rank_begin;
        for (int64_t size : w.micro_batch_sizes) {
          EXPECT_LE(size, micro);
          for (int64_t i = 0; i < size; ++i)
            EXPECT_TRUE(positions.insert(position + i).second);
          position += size;
        }
        EXPECT_EQ(position, w.rank_begin + w.rank_size);
      }
      per_update.push_back(positions);
    }
    coverage.push_back(per_update);
  }
  for (size_t i = 1; i < coverage.size(); ++i)
    EXPECT_EQ(coverage[i], coverage[0]) << "factorisation " << i;
  int64_t covered = 0;
  for (const auto& update : coverage[0])
    covered += int64_t(update.size());
  EXPECT_EQ(covered, dataset);
}

TEST(LastWindow, ParsesAndRejects) {
  EXPECT_EQ(last_window_names().parse("keep"), LastWindow::Keep);
  EXPECT_EQ(last_window_names().parse("drop"), LastWindow::Drop);
  EXPECT_THROW(last_window_names().parse("truncate"), Error);
}

}  // namespace
}  // namespace bigbatch
