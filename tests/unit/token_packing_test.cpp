#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "batching/token_packing.h"

namespace bigbatch {
namespace {

TEST(TokenPacking, LongestFirstWithinTheBudgetCoveringEverySampleOnce) {
  const std::vector<int64_t> lengths = {5, 30, 12, 30, 7, 64, 2};
  const std::vector<int64_t> window = {0, 1, 2, 3, 4, 6};  // sample 5 is another window's
  const TokenPacking p = pack_by_tokens(window.data(), int64_t(window.size()), lengths, 60);
  // Sorted by length, ties in window order: 1 and 3 (30), 2 (12), 4 (7), 0 (5), 6 (2).
  EXPECT_EQ(p.rows, (std::vector<int64_t>{1, 3, 2, 4, 0, 6}));
  // 2 x 30 = 60; then 12 wide: 5 rows would fit (60) but only 4 remain.
  EXPECT_EQ(p.micro_batch_sizes, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(p.padded_tokens, 2 * 30 + 4 * 12);
  EXPECT_EQ(p.tokens, 30 + 30 + 12 + 7 + 5 + 2);
}

TEST(TokenPacking, ARowLongerThanTheBudgetTravelsAlone) {
  const std::vector<int64_t> lengths = {100, 10, 10};
  const std::vector<int64_t> window = {0, 1, 2};
  const TokenPacking p = pack_by_tokens(window.data(), 3, lengths, 20);
  EXPECT_EQ(p.micro_batch_sizes, (std::vector<int64_t>{1, 2}));
}

TEST(TokenPacking, EveryMicroBatchStaysWithinTheBudget) {
  std::vector<int64_t> lengths, window;
  for (int64_t i = 0; i < 200; ++i) {
    lengths.push_back(1 + (i * 37) % 97);
    window.push_back(i);
  }
  for (const int64_t budget : {97, 128, 500, 4096}) {
    const TokenPacking p = pack_by_tokens(window.data(), 200, lengths, budget);
    int64_t begin = 0;
    for (const int64_t rows : p.micro_batch_sizes) {
      int64_t longest = 0;
      for (int64_t i = begin; i < begin + rows; ++i)
        longest = std::max(longest, lengths[size_t(p.rows[size_t(i)])]);
      EXPECT_LE(rows * longest, budget);
      begin += rows;
    }
    EXPECT_EQ(begin, 200);
    std::vector<int64_t> sorted = p.rows;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, window);
  }
}

TEST(TokenPacking, AnEpochCutByTokensCountsEveryWindowsMicroSteps) {
  // Issue 35: what `plan` and the start line say a token budget makes of the epoch.
  BatchRequest request;
  request.global_batch_size = 4;
  request.accumulation_steps = 1;  // the rank's whole share, as under --micro-batch-tokens
  const BatchPlan plan = BatchPlan::resolve(request);
  const EpochPlan epoch = plan_epoch(plan, 10, LastWindow::Keep);  // windows of 4, 4, 2
  const std::vector<int64_t> lengths = {8, 8, 8, 8, 2, 2, 2, 2, 5, 3};
  std::vector<int64_t> order(10);
  for (int64_t i = 0; i < 10; ++i)
    order[size_t(i)] = i;
  const TokenCutEpoch cut = cut_epoch_by_tokens(plan, epoch, order, lengths, 16, /*rank=*/0);
  // 4 rows of 8: 2 micro-steps of 2; 4 rows of 2: one of 4; 5 and 3: one (2 x 5 = 10).
  EXPECT_EQ(cut.micro_steps, 4);
  EXPECT_EQ(cut.fewest_per_window, 1);
  EXPECT_EQ(cut.most_per_window, 2);
  EXPECT_EQ(cut.tokens, 32 + 8 + 8);
  EXPECT_EQ(cut.padded_tokens, 32 + 8 + 10);
  // The same windows, one pack each, as the trainer cuts them.
  int64_t steps = 0;
  for (int64_t update = 0; update < epoch.updates_per_epoch; ++update) {
    const UpdateWindow w = window_for_update(plan, epoch, update, 0);
    steps += int64_t(pack_by_tokens(order.data() + w.rank_begin, w.rank_size, lengths, 16)
                         .micro_batch_sizes.size());
  }
  EXPECT_EQ(steps, cut.micro_steps);
}

}  // namespace
}  // namespace bigbatch
