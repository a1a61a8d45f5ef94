// models/accumulating_linear.h: the fused layer is torch::nn::Linear in everything but where
// its weight gradient is added up.
#include "models/accumulating_linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

namespace bigbatch {
namespace {

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

TEST(AccumulatingLinearTest, SameParametersNamesAndInitialisationAsTorchLinear) {
  torch::manual_seed(7);
  torch::nn::Linear reference(30, 20);
  torch::manual_seed(7);
  AccumulatingLinear layer(30, 20);
  const auto params = layer->named_parameters();
  ASSERT_EQ(params.size(), 2U);
  EXPECT_TRUE(params.contains("weight"));
  EXPECT_TRUE(params.contains("bias"));
  EXPECT_TRUE(torch::equal(layer->weight, reference->weight));
  EXPECT_TRUE(torch::equal(layer->bias, reference->bias));
  const auto x = torch::randn({4, 30});
  EXPECT_TRUE(torch::equal(layer(x), reference(x)));
  // A clone (the thread-count probe clones the model) is an independent copy of the same type.
  auto copy = std::dynamic_pointer_cast<AccumulatingLinearImpl>(layer->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(torch::equal(copy->weight, layer->weight));
  EXPECT_NE(copy->weight.data_ptr(), layer->weight.data_ptr());
}

// Three micro-steps through a two-layer stack, fused and not: the same gradients for every
// parameter (the first layer's input gradient flows through the fused second layer).
TEST(AccumulatingLinearTest, FusedAccumulationEqualsAutogradsOwn) {
  std::vector<std::vector<torch::Tensor>> gradients;
  for (const bool fused : {false, true}) {
    torch::manual_seed(3);
    torch::nn::Sequential model(AccumulatingLinear(12, 16), torch::nn::ReLU(),
                                AccumulatingLinear(16, 5));
    EXPECT_EQ(set_gradient_accumulation_fusion(*model, fused), 2);
    torch::manual_seed(11);
    for (int step = 0; step < 3; ++step) {
      const auto x = torch::randn({8, 12});
      const auto y = torch::randint(0, 5, {8}, torch::kInt64);
      torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    }
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters())
      grads.push_back(p.grad().clone());
    gradients.push_back(grads);
  }
  for (size_t i = 0; i < gradients[0].size(); ++i)
    EXPECT_LT(relative_difference(gradients[1][i], gradients[0][i]), 1e-6) << "parameter " << i;
}

TEST(AccumulatingLinearTest, AddsIntoTheGradientInPlaceAndLeadingDimensionsAreRows) {
  torch::manual_seed(5);
  AccumulatingLinear layer(6, 3);
  const auto x1 = torch::randn({2, 4, 6});
  const auto x2 = torch::randn({2, 4, 6});
  layer(x1).sum().backward();
  const void* storage = layer->weight.grad().data_ptr();
  const auto first = layer->weight.grad().clone();
  layer(x2).sum().backward();
  EXPECT_EQ(layer->weight.grad().data_ptr(), storage);  // added in place, not replaced
  const auto expected = first + torch::ones({8, 3}).t().mm(x2.reshape({8, 6}));
  EXPECT_LT(relative_difference(layer->weight.grad(), expected), 1e-6);
  EXPECT_LT(relative_difference(layer->bias.grad(), torch::full({3}, 16.0)), 1e-6);
}

// A multi-rank reducer starts a bucket's all-reduce from the post-hooks of its parameters'
// gradient accumulators (dist/collective_reducer.cpp). A fused step adds into .grad itself and
// hands autograd no gradient, yet the accumulator still runs after it: the hooks fire once per
// backward pass, and only once the gradient is final.
TEST(AccumulatingLinearTest, AccumulatorHooksFireAfterTheFusedAdditionIsFinal) {
  struct Recorder final : torch::autograd::FunctionPostHook {
    Recorder(torch::Tensor parameter, std::vector<torch::Tensor>* seen)
        : parameter_(std::move(parameter)), seen_(seen) {}
    torch::autograd::variable_list operator()(
        const torch::autograd::variable_list& outputs,
        const torch::autograd::variable_list& /*inputs*/) override {
      seen_->push_back(parameter_.grad().clone());
      return outputs;
    }
    torch::Tensor parameter_;
    std::vector<torch::Tensor>* seen_;
  };
  torch::manual_seed(9);
  AccumulatingLinear layer(5, 3);
  std::vector<torch::Tensor> seen;
  auto accumulator = torch::autograd::impl::grad_accumulator(layer->weight);
  accumulator->add_post_hook(std::make_unique<Recorder>(layer->weight, &seen));
  const auto x1 = torch::randn({4, 5});
  const auto x2 = torch::randn({4, 5});
  layer(x1).pow(2).sum().backward();  // autograd's path: no gradient yet
  layer(x2).pow(2).sum().backward();  // fused: added inside the GEMM
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_TRUE(torch::equal(seen[1], layer->weight.grad()));
  EXPECT_FALSE(torch::equal(seen[0], seen[1]));
}

TEST(AccumulatingLinearTest, FrozenWeightsGetNoGradient) {
  AccumulatingLinear layer(4, 2);
  layer->weight.set_requires_grad(false);
  const auto x = torch::randn({3, 4}, torch::requires_grad());
  layer(x).sum().backward();
  layer(x).sum().backward();
  EXPECT_FALSE(layer->weight.grad().defined());
  EXPECT_TRUE(layer->bias.grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

}  // namespace
}  // namespace bigbatch
