// A loop the user writes (train/user_loop.h, the Python package's Accumulator) trains with the
// engine's mathematics: the windows follow the epoch's order, any split of a window into
// micro-batches ends at the same weights, and the update is the mean gradient over the window
// (a short last window included), as plain float64 arithmetic computes it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/error.h"
#include "data/sampler.h"
#include "train/user_loop.h"

namespace bigbatch {
namespace {

constexpr int64_t kSamples = 100;  // 3 windows of 32 and a short one of 4 per epoch

struct Problem {
  torch::Tensor inputs;   // [N, 3] float64
  torch::Tensor targets;  // [N, 2]
};

Problem regression_problem() {
  torch::manual_seed(7);
  Problem p;
  p.inputs = torch::randn({kSamples, 3}, torch::kFloat64);
  p.targets = p.inputs.mm(torch::randn({3, 2}, torch::kFloat64)) +
              0.1 * torch::randn({kSamples, 2}, torch::kFloat64);
  return p;
}

TrainConfig plain_sgd(int64_t micro_batch) {
  TrainConfig config;
  config.global_batch = 32;
  config.micro_batch = micro_batch;
  config.lr = 0.05;
  config.lr_scaling = LrScaling::None;
  config.schedule = ScheduleKind::Constant;
  config.momentum = 0.9;
  config.nesterov = false;
  config.weight_decay = 0;
  config.epochs = 2;
  config.seed = 5;
  return config;
}

struct Linear {
  torch::Tensor weight = torch::zeros({2, 3}, torch::kFloat64).requires_grad_();
  torch::Tensor bias = torch::zeros({2}, torch::kFloat64).requires_grad_();
  NamedTensors named() const { return {{"head.weight", weight}, {"head.bias", bias}}; }
};

// Trains the linear model through a UserLoop; returns its weights after every update.
std::vector<torch::Tensor> train_user_loop(const TrainConfig& config, const Problem& p) {
  Linear model;
  UserLoop loop(config, kSamples, model.named());
  std::vector<torch::Tensor> history;
  while (!loop.complete()) {
    const auto micro_batches = loop.next_window();
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      const torch::Tensor index = torch::tensor(micro_batches[i], torch::kInt64);
      const torch::Tensor out = p.inputs.index_select(0, index).mm(model.weight.t()) + model.bias;
      const torch::Tensor loss = (out - p.targets.index_select(0, index)).pow(2).sum();
      const auto rows = static_cast<int64_t>(micro_batches[i].size());
      loop.backward(loss, rows, rows * 2, /*last=*/i + 1 == micro_batches.size());
    }
    const UserLoopStep step = loop.step();
    EXPECT_FALSE(step.skipped);
    EXPECT_DOUBLE_EQ(step.lr, 0.05);
    history.push_back(torch::cat({model.weight.detach().flatten(), model.bias.detach()}));
  }
  return history;
}

TEST(UserLoop, AnySplitOfTheWindowEndsAtTheSameWeights) {
  const Problem p = regression_problem();
  const auto whole = train_user_loop(plain_sgd(32), p);
  const auto split = train_user_loop(plain_sgd(8), p);
  const auto uneven = train_user_loop(plain_sgd(12), p);  // 12 + 12 + 8
  ASSERT_EQ(whole.size(), 8u);                            // 4 windows per epoch, 2 epochs
  ASSERT_EQ(split.size(), whole.size());
  for (size_t u = 0; u < whole.size(); ++u) {
    EXPECT_LT((whole[u] - split[u]).abs().max().item<double>(), 1e-13) << "update " << u;
    EXPECT_LT((whole[u] - uneven[u]).abs().max().item<double>(), 1e-13) << "update " << u;
  }
}

TEST(UserLoop, EachUpdateIsTheMeanGradientOverItsWindowInFloat64) {
  const Problem p = regression_problem();
  const TrainConfig config = plain_sgd(8);
  const auto trained = train_user_loop(config, p);
  // The same run in plain arithmetic: the epoch's order, windows of 32 (the last one 4), the
  // mean of the squared error's gradient over the window's items, SGD with momentum.
  torch::Tensor w = torch::zeros({2, 3}, torch::kFloat64);
  torch::Tensor b = torch::zeros({2}, torch::kFloat64);
  torch::Tensor w_buf, b_buf;
  size_t u = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto order = epoch_order(config.seed, epoch, kSamples, Shuffle::On);
    for (int64_t begin = 0; begin < kSamples; begin += 32) {
      const int64_t end = std::min<int64_t>(kSamples, begin + 32);
      const torch::Tensor index = torch::tensor(
          std::vector<int64_t>(order.begin() + begin, order.begin() + end), torch::kInt64);
      const torch::Tensor x = p.inputs.index_select(0, index);
      const torch::Tensor residual = x.mm(w.t()) + b - p.targets.index_select(0, index);
      const double items = double(2 * (end - begin));
      const torch::Tensor w_grad = 2 * residual.t().mm(x) / items;
      const torch::Tensor b_grad = 2 * residual.sum(0) / items;
      w_buf = w_buf.defined() ? 0.9 * w_buf + w_grad : w_grad;
      b_buf = b_buf.defined() ? 0.9 * b_buf + b_grad : b_grad;
      w = w - 0.05 * w_buf;
      b = b - 0.05 * b_buf;
      ASSERT_LT(u, trained.size());
      const torch::Tensor expected = torch::cat({w.flatten(), b});
      EXPECT_LT((trained[u] - expected).abs().max().item<double>(), 1e-12) << "update " << u;
      ++u;
    }
  }
  EXPECT_EQ(u, trained.size());
}

TEST(UserLoop, MisuseIsOneClearError) {
  const Problem p = regression_problem();
  Linear model;
  UserLoop loop(plain_sgd(16), kSamples, model.named());
  EXPECT_THROW(loop.step(), Error);  // no window yet
  const auto micro_batches = loop.next_window();
  ASSERT_EQ(micro_batches.size(), 2u);
  const torch::Tensor mean_loss = model.weight.sum() * 0;
  EXPECT_THROW(loop.backward(mean_loss.detach(), 16, 16, false), Error);  // no gradient
  EXPECT_THROW(loop.backward(model.weight * 1, 16, 16, false), Error);    // not one number
  loop.backward(model.weight.sum(), 16, 16, false);
  EXPECT_THROW(loop.step(), Error);  // one micro-batch of two has had its backward
  TrainConfig ramp = plain_sgd(16);
  ramp.global_batch.reset();
  ramp.global_batch_schedule = "0:16 50s:32";
  EXPECT_THROW(UserLoop(ramp, kSamples, Linear().named()), Error);
}

}  // namespace
}  // namespace bigbatch
