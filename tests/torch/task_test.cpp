// The task: which one a model and its data make, and a batch's summed loss and items against
// the loss written out by hand (cross-entropy over classes and over token rows with padding,
// the squared error over samples and outputs), in fp32 also under bf16 autocast.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "data/text_corpus.h"
#include "task/task.h"

namespace bigbatch {
namespace {

torch::nn::Sequential linear(int64_t in, int64_t out) {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(in, out));
}

TEST(Task, ChosenFromTheModelAndTheData) {
  auto model = linear(4, 3);
  EXPECT_EQ(Task::of(*model, /*regression=*/false).kind(), Task::Kind::Classify);
  EXPECT_TRUE(Task::of(*model, false).scores_predictions());
  const Task regress = Task::of(*model, /*regression=*/true);
  EXPECT_EQ(regress.kind(), Task::Kind::Regress);
  EXPECT_TRUE(regress.is_regression());
  EXPECT_FALSE(regress.scores_predictions());
  TensorDataset data;
  data.targets = torch::zeros({5, 2});
  EXPECT_EQ(Task::of(*model, data).kind(), Task::Kind::Regress);
  data.targets = torch::zeros({5}, torch::kInt64);
  EXPECT_EQ(Task::of(*model, data).kind(), Task::Kind::Classify);
}

TEST(Task, ClassificationSumsCrossEntropyAndCountsCorrectPredictions) {
  auto model = linear(4, 3);
  torch::manual_seed(5);
  const Batch batch{torch::randn({6, 4}), torch::tensor({0, 2, 1, 1, 0, 2}), 6};
  PredictionTally tally;
  const TaskLoss loss = Task::of(*model, false).loss(model, batch, Precision::Fp32, &tally);
  const torch::Tensor logits = model->forward(batch.inputs);
  const torch::Tensor by_hand =
      -torch::log_softmax(logits, 1).gather(1, batch.targets.unsqueeze(1)).sum();
  EXPECT_NEAR(loss.loss_sum.item<double>(), by_hand.item<double>(), 1e-5);
  EXPECT_EQ(loss.items, 6);
  EXPECT_EQ(tally.correct(), logits.argmax(1).eq(batch.targets).sum().item<int64_t>());
  EXPECT_NEAR(tally.loss_sum(), by_hand.item<double>(), 1e-5);
}

TEST(Task, TokenRowsCountTheirTargetTokensAndIgnorePadding) {
  // Two rows of three positions over a vocabulary of 5, the second row padded after one token.
  const torch::Tensor targets = torch::tensor({{1, 2, 3}, {4, kIgnoreTarget, kIgnoreTarget}});
  EXPECT_EQ(Task::items_of(targets), 4);
  EXPECT_EQ(Task::items_of(torch::tensor({1, 2, 3})), 3);
  EXPECT_EQ(Task::items_of(torch::zeros({3, 2})), 3);  // regression: one item per sample

  auto model = linear(2, 5);
  torch::manual_seed(7);
  const Batch batch{torch::randn({2, 3, 2}), targets, 4};
  const TaskLoss loss = Task::of(*model, false).loss(model, batch, Precision::Fp32);
  const torch::Tensor log_p = torch::log_softmax(model->forward(batch.inputs), -1);
  double by_hand = 0;
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t t = 0; t < 3; ++t) {
      const int64_t target = targets[row][t].item<int64_t>();
      if (target != kIgnoreTarget)
        by_hand -= log_p[row][t][target].item<double>();
    }
  }
  EXPECT_NEAR(loss.loss_sum.item<double>(), by_hand, 1e-5);
  EXPECT_EQ(loss.items, 4);
}

TEST(Task, LabelSmoothingMixesTheTargetWithTheUniformDistributionOverLogits) {
  // In float64, token rows with padding: each counted row's loss is
  // (1 - eps) (-log p[target]) + eps mean_j (-log p[j]); padding adds nothing; the items stay
  // the target tokens.
  auto model = linear(2, 5);
  model->to(torch::kFloat64);
  torch::manual_seed(11);
  const torch::Tensor targets = torch::tensor({{1, 2, 3}, {4, kIgnoreTarget, kIgnoreTarget}});
  const Batch batch{torch::randn({2, 3, 2}, torch::kFloat64), targets, 4};
  const double eps = 0.2;
  const Task task = Task::of(*model, false).with_label_smoothing(eps);
  EXPECT_EQ(task.label_smoothing(), eps);
  const TaskLoss loss = task.loss(model, batch, Precision::Fp32);
  const torch::Tensor log_p = torch::log_softmax(model->forward(batch.inputs), -1);
  double by_hand = 0;
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t t = 0; t < 3; ++t) {
      const int64_t target = targets[row][t].item<int64_t>();
      if (target == kIgnoreTarget)
        continue;
      by_hand += -(1 - eps) * log_p[row][t][target].item<double>() -
                 eps * log_p[row][t].mean().item<double>();
    }
  }
  EXPECT_NEAR(loss.loss_sum.item<double>(), by_hand, 1e-12);
  EXPECT_EQ(loss.items, 4);
  // Zero is the plain task; a regression or a module's own loss cannot be smoothed.
  EXPECT_EQ(Task::of(*model, false).with_label_smoothing(0).label_smoothing(), 0);
  EXPECT_THROW(Task::of(*model, /*regression=*/true).with_label_smoothing(eps), Error);
}

TEST(Task, RegressionSumsTheSquaredErrorOverSamplesAndOutputs) {
  auto model = linear(3, 2);
  torch::manual_seed(9);
  const Batch batch{torch::randn({4, 3}), torch::randn({4, 2}), 4};
  PredictionTally tally;
  const TaskLoss loss = Task::of(*model, true).loss(model, batch, Precision::Fp32, &tally);
  const double by_hand =
      (model->forward(batch.inputs) - batch.targets).square().sum().item<double>();
  EXPECT_NEAR(loss.loss_sum.item<double>(), by_hand, 1e-5);
  EXPECT_EQ(loss.items, 4);
  EXPECT_EQ(tally.correct(), 0);  // nothing scored
}

// A branch test pairs samples: each sample's loss, which sums to the batch's.
TEST(Task, SampleLossesSumToTheBatchsLoss) {
  torch::NoGradGuard no_grad;
  auto classes = linear(4, 3);
  torch::manual_seed(5);
  const Batch images{torch::randn({6, 4}), torch::tensor({0, 2, 1, 1, 0, 2}), 6};
  const Task classify = Task::of(*classes, false);
  const TaskLoss each = classify.sample_losses(classes, images, Precision::Fp32);
  ASSERT_EQ(each.loss_sum.sizes(), torch::IntArrayRef({6}));
  EXPECT_EQ(each.items, 6);
  EXPECT_NEAR(each.loss_sum.sum().item<double>(),
              classify.loss(classes, images, Precision::Fp32).loss_sum.item<double>(), 1e-5);
  // One row alone is that row's loss.
  const Batch third{images.inputs.slice(0, 2, 3), images.targets.slice(0, 2, 3), 1};
  EXPECT_NEAR(each.loss_sum[2].item<double>(),
              classify.loss(classes, third, Precision::Fp32).loss_sum.item<double>(), 1e-6);
  // Token rows: a row's target tokens, padding nowhere; label smoothing left out.
  auto tokens = linear(2, 5);
  const Batch rows{torch::randn({2, 3, 2}),
                   torch::tensor({{1, 2, 3}, {4, kIgnoreTarget, kIgnoreTarget}}), 4};
  const Task smoothed = Task::of(*tokens, false).with_label_smoothing(0.2);
  const TaskLoss per_row = smoothed.sample_losses(tokens, rows, Precision::Fp32);
  EXPECT_EQ(per_row.items, 4);
  EXPECT_NEAR(per_row.loss_sum.sum().item<double>(),
              Task::of(*tokens, false).loss(tokens, rows, Precision::Fp32).loss_sum.item<double>(),
              1e-5);
  const Batch second{rows.inputs.slice(0, 1, 2), rows.targets.slice(0, 1, 2), 1};
  EXPECT_NEAR(
      per_row.loss_sum[1].item<double>(),
      Task::of(*tokens, false).loss(tokens, second, Precision::Fp32).loss_sum.item<double>(), 1e-6);
  // Regression: the squared error over each sample's outputs.
  auto values = linear(3, 2);
  const Batch targets{torch::randn({4, 3}), torch::randn({4, 2}), 4};
  const TaskLoss errors = Task::of(*values, true).sample_losses(values, targets, Precision::Fp32);
  const torch::Tensor by_hand = (values->forward(targets.inputs) - targets.targets).square().sum(1);
  EXPECT_TRUE(torch::allclose(errors.loss_sum, by_hand));
}

TEST(Task, Bf16ForwardPassesGiveAnFp32Loss) {
  auto model = linear(8, 3);
  torch::manual_seed(11);
  const Batch batch{torch::randn({4, 8}), torch::tensor({0, 1, 2, 1}), 4};
  const TaskLoss loss = Task::of(*model, false).loss(model, batch, Precision::Bf16);
  EXPECT_EQ(loss.loss_sum.scalar_type(), torch::kFloat32);
  const TaskLoss fp32 = Task::of(*model, false).loss(model, batch, Precision::Fp32);
  EXPECT_NEAR(loss.loss_sum.item<double>(), fp32.loss_sum.item<double>(),
              0.05 * fp32.loss_sum.item<double>());
}

}  // namespace
}  // namespace bigbatch
