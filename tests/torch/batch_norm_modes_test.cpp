// BatchNorm under accumulation: the momentum correction keeps the running statistics' horizon
// in updates, frozen BatchNorm and the GroupNorm rewrite make accumulation exact, and
// evaluation leaves each layer's mode as it found it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "data/dataset.h"
#include "models/models.h"
#include "train/evaluate.h"

namespace bigbatch {
namespace {

TEST(BatchNormModes, CorrectedMomentumMovesRunningStatisticsAsOneUpdate) {
  // k micro-steps at the corrected momentum move the running mean as one step at 0.1 does,
  // for the same statistics: (1 - m')^k = 1 - m.
  torch::manual_seed(0);
  const auto batch = torch::randn({16, 4, 5, 5}) * 3 + 2;
  for (int64_t k : {1, 4, 16}) {
    torch::nn::BatchNorm2d once(torch::nn::BatchNorm2dOptions(4).momentum(0.1));
    once->forward(batch);
    torch::nn::BatchNorm2d accumulated(
        torch::nn::BatchNorm2dOptions(4).momentum(micro_step_momentum(0.1, k)));
    for (int64_t i = 0; i < k; ++i)
      accumulated->forward(batch);
    EXPECT_LT((accumulated->running_mean - once->running_mean).abs().max().item<double>(), 1e-6)
        << k;
    EXPECT_LT((accumulated->running_var - once->running_var).abs().max().item<double>(), 1e-5) << k;
  }
  EXPECT_DOUBLE_EQ(micro_step_momentum(0.1, 1), 0.1);
  EXPECT_NEAR(micro_step_momentum(0.1, 8), 1 - std::pow(0.9, 1.0 / 8), 1e-15);

  auto model = make_model({.name = "cnn-bn"});
  set_batch_norm_momentum(*model, 0.02);
  EXPECT_DOUBLE_EQ(model[1]->as<torch::nn::BatchNorm2d>()->options.momentum().value(), 0.02);
}

TEST(BatchNormModes, FrozenLayersStayFrozenThroughEvaluation) {
  auto model = make_model({.name = "cnn-bn"});
  model->train();
  EXPECT_EQ(batch_statistics_layers(*model), (std::vector<std::string>{"1", "5"}));
  apply_batch_norm_mode(*model, BatchNormMode::Frozen);
  EXPECT_TRUE(batch_statistics_layers(*model).empty());
  EXPECT_FALSE(uses_batch_statistics(*model));
  EXPECT_TRUE(model->is_training());  // the rest trains as usual
  torch::manual_seed(1);
  TensorDataset data{torch::randn({8, 1, 28, 28}), torch::randint(0, 10, {8}, torch::kInt64)};
  evaluate(model, data, 4);
  EXPECT_TRUE(batch_statistics_layers(*model).empty());
  EXPECT_TRUE(model->is_training());
  EXPECT_THROW(parse_batch_norm_mode("window"), Error);
}

TEST(BatchNormModes, GroupNormRewriteKeepsNamesAndRemovesBatchDependence) {
  torch::manual_seed(0);
  auto model = make_model({.name = "cnn-bn"});
  auto rewritten = rewrite_batch_norm_as_group_norm(model);
  EXPECT_FALSE(uses_batch_statistics(*rewritten));
  EXPECT_TRUE(rewritten[1]->as<torch::nn::GroupNorm>() != nullptr);
  EXPECT_EQ(rewritten[1]->as<torch::nn::GroupNorm>()->options.num_groups(), 8);
  EXPECT_EQ(model->named_parameters().keys(), rewritten->named_parameters().keys());
  // Per-sample: a sample's output does not depend on its batch-mates.
  const auto inputs = torch::randn({6, 1, 28, 28});
  const auto together = rewritten->forward(inputs);
  const auto alone = rewritten->forward(inputs.slice(0, 0, 1));
  EXPECT_LT((together.slice(0, 0, 1) - alone).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace bigbatch
