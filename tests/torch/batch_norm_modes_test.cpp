// BatchNorm under accumulation: the momentum correction keeps the running statistics' horizon
// in updates, frozen BatchNorm and the GroupNorm rewrite make accumulation exact, and
// evaluation leaves each layer's mode as it found it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "data/dataset.h"
#include "models/models.h"
#include "train/evaluate.h"
#include "train/window_batch_norm.h"

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
  EXPECT_EQ(batch_norm_mode_names().parse("window"), BatchNormMode::Window);
  EXPECT_THROW(batch_norm_mode_names().parse("ghost"), Error);
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

// A window of 48 samples in three micro-batches of 16, and the same weights three times.
struct WindowFixture {
  TensorDataset data{torch::randn({48, 1, 28, 28}) * 2 + 0.5,
                     torch::randint(0, 10, {48}, torch::kInt64)};
  std::vector<int64_t> order;
  UpdateWindow window{0, 48, 0, 48, {16, 16, 16}};
  WindowFixture() {
    for (int64_t i = 0; i < 48; ++i)
      order.push_back(i);
  }
  static torch::nn::Sequential model() {
    torch::manual_seed(3);
    auto m = make_model({.name = "cnn-bn"});
    m->train();
    return m;
  }
};

// Summed cross-entropy, back-propagated: gradients of several calls add up as one batch's.
void backward_summed_loss(torch::nn::Sequential& model, const torch::Tensor& inputs,
                          const torch::Tensor& targets) {
  torch::nn::functional::cross_entropy(
      model->forward(inputs), targets,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
      .backward();
}

TEST(WindowBatchNorm, NormalisesLikeOneBatchAndMovesRunningStatisticsOnce) {
  torch::manual_seed(2);
  WindowFixture f;
  auto windowed = WindowFixture::model();
  BatchAssembler assembler(f.data, 16);
  WindowBatchNorm window_bn(windowed, 0.1, Precision::Fp32);
  ASSERT_TRUE(window_bn.active());
  window_bn.begin(assembler, f.order, f.window);
  std::vector<torch::Tensor> outputs;
  for (int64_t begin : {0, 16, 32})
    outputs.push_back(windowed->forward(assembler.gather(f.order, begin, 16).inputs).clone());
  window_bn.end(/*applied=*/true);
  auto whole = WindowFixture::model();
  const auto expected = whole->forward(f.data.inputs);
  EXPECT_LT((torch::cat(outputs) - expected).abs().max().item<double>(), 1e-4);
  // Running statistics: one step of momentum 0.1 by the window's statistics, as one batch.
  for (const char* layer : {"1", "5"}) {
    const auto mine = windowed->named_buffers()[std::string(layer) + ".running_var"];
    const auto theirs = whole->named_buffers()[std::string(layer) + ".running_var"];
    EXPECT_LT((mine - theirs).abs().max().item<double>(), 1e-5) << layer;
    const auto mine_mean = windowed->named_buffers()[std::string(layer) + ".running_mean"];
    const auto theirs_mean = whole->named_buffers()[std::string(layer) + ".running_mean"];
    EXPECT_LT((mine_mean - theirs_mean).abs().max().item<double>(), 1e-6) << layer;
  }
  EXPECT_EQ(batch_statistics_layers(*windowed), (std::vector<std::string>{"1", "5"}));
}

TEST(WindowBatchNorm, GradientIsOneBatchsWithTheStatisticsHeldConstant) {
  torch::manual_seed(4);
  WindowFixture f;
  // Accumulated under window mode: summed losses, one backward per micro-batch.
  auto windowed = WindowFixture::model();
  BatchAssembler assembler(f.data, 16);
  WindowBatchNorm window_bn(windowed, 0.1, Precision::Fp32);
  window_bn.begin(assembler, f.order, f.window);
  for (int64_t begin : {0, 16, 32}) {
    const Batch b = assembler.gather(f.order, begin, 16);
    backward_summed_loss(windowed, b.inputs, b.targets);
  }
  window_bn.end(/*applied=*/false);
  // The oracle: one batch with every BatchNorm normalising by that batch's own statistics,
  // taken as constants (measured layer by layer, then eval-mode arithmetic).
  auto oracle = WindowFixture::model();
  torch::Tensor x = f.data.inputs;
  {
    torch::NoGradGuard no_grad;
    for (auto it = oracle->begin(); it != oracle->end(); ++it) {
      if (auto* bn = it->ptr()->as<torch::nn::BatchNorm2d>()) {
        bn->running_mean.copy_(x.mean({0, 2, 3}));
        bn->running_var.copy_(x.var({0, 2, 3}, /*unbiased=*/false));
        bn->eval();
      }
      x = it->forward(x);
    }
  }
  backward_summed_loss(oracle, f.data.inputs, f.data.targets);
  const auto mine = windowed->parameters();
  const auto theirs = oracle->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    const double scale = theirs[i].grad().norm().item<double>() + 1e-12;
    EXPECT_LT((mine[i].grad() - theirs[i].grad()).norm().item<double>() / scale, 1e-4) << i;
  }
  // ... which is not the true big batch's gradient: that one flows through the statistics.
  auto whole = WindowFixture::model();
  backward_summed_loss(whole, f.data.inputs, f.data.targets);
  EXPECT_GT((mine[0].grad() - whole->parameters()[0].grad()).norm().item<double>() /
                whole->parameters()[0].grad().norm().item<double>(),
            1e-3);
}

TEST(WindowBatchNorm, CheckpointsInsideAWindowSeeTheRunningStatistics) {
  torch::manual_seed(5);
  WindowFixture f;
  auto model = WindowFixture::model();
  const auto before = model->named_buffers()["1.running_var"].clone();
  BatchAssembler assembler(f.data, 16);
  WindowBatchNorm window_bn(model, 0.1, Precision::Fp32);
  window_bn.begin(assembler, f.order, f.window);
  const auto window_var = model->named_buffers()["1.running_var"].clone();
  EXPECT_GT((window_var - before).abs().max().item<double>(), 1e-3);
  window_bn.suspend();
  EXPECT_TRUE(torch::equal(model->named_buffers()["1.running_var"], before));
  window_bn.resume();
  EXPECT_TRUE(torch::equal(model->named_buffers()["1.running_var"], window_var));
  window_bn.end(/*applied=*/false);  // a discarded window leaves no trace
  EXPECT_TRUE(torch::equal(model->named_buffers()["1.running_var"], before));
  EXPECT_EQ(batch_statistics_layers(*model), (std::vector<std::string>{"1", "5"}));
  window_bn.end(/*applied=*/true);  // nothing open: nothing happens
  EXPECT_TRUE(torch::equal(model->named_buffers()["1.running_var"], before));
}

}  // namespace
}  // namespace bigbatch
