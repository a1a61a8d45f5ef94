// models/max_pool_2x2.h: bit-identical to torch::max_pool2d(x, 2), forward and gradient, for
// even and odd sizes, ties (ReLU zeros), NaN and -inf, and one or several threads; libtorch's
// own operator for tensors the loop does not cover. And the cnn models, which pool before their
// ReLU, bit-identical to the usual order (conv, ReLU, pool) built from libtorch's modules.
#include "models/max_pool_2x2.h"

#include "models/models.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

namespace bigbatch {
namespace {

// Output and input gradient of both poolings for `input`, with one upstream gradient.
void expect_identical(const torch::Tensor& input) {
  const auto ours_input = input.detach().clone().set_requires_grad(true);
  const auto theirs_input = input.detach().clone().set_requires_grad(true);
  const auto ours = max_pool_2x2(ours_input);
  const auto theirs = torch::max_pool2d(theirs_input, 2);
  ASSERT_EQ(ours.sizes(), theirs.sizes());
  EXPECT_TRUE(torch::equal(ours.isnan(), theirs.isnan()));
  EXPECT_TRUE(torch::equal(ours.nan_to_num(0), theirs.nan_to_num(0)));
  torch::manual_seed(3);
  const auto upstream = torch::randn_like(theirs);
  ours.backward(upstream);
  theirs.backward(upstream);
  EXPECT_TRUE(torch::equal(ours_input.grad(), theirs_input.grad()));
}

TEST(MaxPool2x2, SameAsLibtorchForEvenAndOddSizes) {
  torch::manual_seed(1);
  for (const auto& shape : std::vector<std::vector<int64_t>>{
           {4, 32, 26, 26}, {3, 64, 11, 11}, {2, 3, 2, 2}, {1, 1, 5, 8}, {2, 2, 7, 3}}) {
    expect_identical(torch::randn(shape));
  }
}

TEST(MaxPool2x2, TiesGoToTheFirstMaximumAsInLibtorch) {
  // After a ReLU most windows hold equal zeros; a gradient must reach the same one.
  torch::manual_seed(1);
  expect_identical(torch::relu(torch::randn({8, 16, 12, 12}) - 1.0));
  expect_identical(torch::ones({2, 4, 6, 6}));
}

TEST(MaxPool2x2, NanAndInfinitiesAsInLibtorch) {
  torch::manual_seed(1);
  auto x = torch::randn({2, 3, 8, 8});
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  x.index_put_({0, 0, 0, 1}, nan);  // one NaN in a window
  x.index_put_({0, 1, 2, 2}, nan);  // two: the last one wins
  x.index_put_({0, 1, 3, 3}, nan);
  x.index_put_({1, 0}, -inf);  // a whole plane of -inf: the first position
  x.index_put_({1, 1, 4, 4}, inf);
  expect_identical(x);
}

TEST(MaxPool2x2, SameWithSeveralThreads) {
  const int threads = torch::get_num_threads();
  torch::set_num_threads(2);
  torch::manual_seed(1);
  expect_identical(torch::randn({16, 32, 26, 26}));  // many planes: split across threads
  torch::set_num_threads(threads);
}

TEST(MaxPool2x2, WithoutGradientsAndOutsideTheLoop) {
  torch::manual_seed(1);
  const auto x = torch::randn({2, 4, 10, 10});
  {
    torch::InferenceMode inference;  // evaluation: no winners recorded
    EXPECT_TRUE(torch::equal(max_pool_2x2(x), torch::max_pool2d(x, 2)));
  }
  // Tensors the loop does not cover take libtorch's operator: fp64, channels-last, 3-D.
  expect_identical(x.to(torch::kFloat64));
  expect_identical(x.contiguous(torch::MemoryFormat::ChannelsLast));
  expect_identical(x[0]);
  // The module is what the cnn models use.
  EXPECT_TRUE(torch::equal(MaxPool2x2()(x), torch::max_pool2d(x, 2)));
}

// The usual order, conv [norm] relu maxpool2, with libtorch's modules throughout.
torch::nn::Sequential usual_cnn(const std::string& name) {
  torch::nn::Sequential model;
  int64_t channels = 1;
  for (int64_t out : {32, 64}) {
    model->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, out, 3).bias(name != "cnn-bn")));
    if (name == "cnn-bn")
      model->push_back(torch::nn::BatchNorm2d(out));
    if (name == "cnn-gn")
      model->push_back(torch::nn::GroupNorm(8, out));
    model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::MaxPool2d(2));
    channels = out;
  }
  model->push_back(torch::nn::Flatten());
  model->push_back(torch::nn::Linear(1600, 128));
  model->push_back(torch::nn::ReLU());
  model->push_back(torch::nn::Linear(128, 10));
  return model;
}

TEST(CnnModels, PoolingBeforeReluIsTheUsualOrderBitForBit) {
  for (const std::string name : {"cnn", "cnn-bn", "cnn-gn"}) {
    torch::manual_seed(1);
    auto ours = make_model({.name = name});
    auto usual = usual_cnn(name);
    {
      // Same parameter names (the swapped layers have none), so the weights carry over.
      torch::NoGradGuard no_grad;
      auto theirs = usual->named_parameters();
      for (const auto& item : ours->named_parameters())
        theirs[item.key()].copy_(item.value());
    }
    torch::manual_seed(2);
    // Half the pixels negative: many windows where ReLU and pooling meet at zero.
    const auto images = torch::randn({8, 1, 28, 28});
    const auto labels = torch::randint(0, 10, {8}, torch::kInt64);
    const auto out_ours = ours->forward(images);
    const auto out_usual = usual->forward(images);
    EXPECT_TRUE(torch::equal(out_ours, out_usual)) << name;
    torch::nn::functional::cross_entropy(out_ours, labels).backward();
    torch::nn::functional::cross_entropy(out_usual, labels).backward();
    auto usual_parameters = usual->named_parameters();
    for (const auto& item : ours->named_parameters())
      EXPECT_TRUE(torch::equal(item.value().grad(), usual_parameters[item.key()].grad()))
          << name << " " << item.key();
  }
}

}  // namespace
}  // namespace bigbatch
