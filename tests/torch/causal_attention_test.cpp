// models/causal_attention.h: the CPU kernel computes the textbook composition's mathematics —
// outputs and gradients — at any length (blocks full, partial, one position), head count and
// thread count, and never lets a position see its future.
#include "models/causal_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>
#include <vector>

namespace bigbatch {
namespace {

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

struct OutputAndGradient {
  torch::Tensor output, grad_qkv;
};

// One forward and backward with a fixed upstream gradient.
template <typename Attention>
OutputAndGradient run(const Attention& attention, const torch::Tensor& qkv_values,
                      const torch::Tensor& upstream) {
  const torch::Tensor qkv = qkv_values.clone().requires_grad_(true);
  const torch::Tensor output = attention(qkv);
  output.backward(upstream);
  return {output.detach(), qkv.grad()};
}

class CausalAttentionShapes
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t>> {};

// Lengths around the 64-position blocks (1, 63, 64, 65, 200) and head counts 1, 2 and 4:
// float64 agrees with the reference to rounding.
TEST_P(CausalAttentionShapes, KernelEqualsTheReferenceInFloat64) {
  const auto [batch, length, d, heads] = GetParam();
  torch::manual_seed(length * 31 + heads);
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor qkv = torch::randn({batch, length, 3 * d}, options);
  const torch::Tensor upstream = torch::randn({batch, length, d}, options);
  const auto kernel =
      run([&](const torch::Tensor& x) { return causal_attention_cpu(x, heads); }, qkv, upstream);
  const auto reference = run(
      [&](const torch::Tensor& x) { return causal_attention_reference(x, heads); }, qkv, upstream);
  EXPECT_LT(relative_difference(kernel.output, reference.output), 1e-13);
  EXPECT_LT(relative_difference(kernel.grad_qkv, reference.grad_qkv), 1e-13);
}

INSTANTIATE_TEST_SUITE_P(Lengths, CausalAttentionShapes,
                         ::testing::Values(std::make_tuple(3, 1, 8, 2),
                                           std::make_tuple(2, 63, 16, 4),
                                           std::make_tuple(2, 64, 16, 1),
                                           std::make_tuple(2, 65, 24, 2),
                                           std::make_tuple(1, 200, 32, 4)));

TEST(CausalAttentionTest, KernelEqualsTheReferenceInFloat32) {
  torch::manual_seed(5);
  const torch::Tensor qkv = torch::randn({4, 256, 3 * 128});
  const torch::Tensor upstream = torch::randn({4, 256, 128});
  const auto kernel =
      run([](const torch::Tensor& x) { return causal_attention_cpu(x, 4); }, qkv, upstream);
  const auto reference =
      run([](const torch::Tensor& x) { return causal_attention_reference(x, 4); }, qkv, upstream);
  EXPECT_LT(relative_difference(kernel.output, reference.output), 1e-6);
  EXPECT_LT(relative_difference(kernel.grad_qkv, reference.grad_qkv), 1e-6);
}

// Each head is computed whole by one thread, so the thread count changes no bit (a run repeats
// exactly whatever --threads chose).
TEST(CausalAttentionTest, ThreadCountChangesNoBit) {
  torch::manual_seed(9);
  const torch::Tensor qkv = torch::randn({3, 130, 3 * 64});
  const torch::Tensor upstream = torch::randn({3, 130, 64});
  const int threads = torch::get_num_threads();
  std::vector<OutputAndGradient> results;
  for (const int count : {1, 2, 3}) {
    torch::set_num_threads(count);
    results.push_back(
        run([](const torch::Tensor& x) { return causal_attention_cpu(x, 4); }, qkv, upstream));
  }
  torch::set_num_threads(threads);
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_TRUE(torch::equal(results[i].output, results[0].output)) << i;
    EXPECT_TRUE(torch::equal(results[i].grad_qkv, results[0].grad_qkv)) << i;
  }
}

// Changing what later positions hold changes nothing at earlier ones, and earlier positions'
// gradients do not reach later inputs through them.
TEST(CausalAttentionTest, NoPositionSeesItsFuture) {
  torch::manual_seed(13);
  const torch::Tensor qkv = torch::randn({2, 100, 3 * 32});
  torch::Tensor changed = qkv.clone();
  changed.narrow(1, 70, 30).normal_();
  const torch::Tensor before = causal_attention_cpu(qkv, 2);
  const torch::Tensor after = causal_attention_cpu(changed, 2);
  EXPECT_TRUE(torch::equal(before.narrow(1, 0, 70), after.narrow(1, 0, 70)));
  EXPECT_FALSE(torch::equal(before.narrow(1, 70, 30), after.narrow(1, 70, 30)));
  // The gradient of the first 70 outputs only: no input after position 69 receives any.
  torch::Tensor upstream = torch::zeros({2, 100, 32});
  upstream.narrow(1, 0, 70).normal_();
  const auto result =
      run([](const torch::Tensor& x) { return causal_attention_cpu(x, 2); }, qkv, upstream);
  EXPECT_EQ(result.grad_qkv.narrow(1, 70, 30).abs().max().item<double>(), 0.0);
}

TEST(CausalAttentionTest, TheKernelServesWhereItAppliesAndTheReferenceElsewhere) {
  const torch::Tensor qkv = torch::randn({2, 10, 3 * 8});
  EXPECT_TRUE(fusable_attention(qkv));
  EXPECT_TRUE(fusable_attention(qkv.to(torch::kFloat64)));
  EXPECT_FALSE(fusable_attention(qkv.to(torch::kBFloat16)));  // autocast's dtype
  EXPECT_FALSE(fusable_attention(qkv.transpose(0, 1)));       // not contiguous
  // With dropout due, the reference applies it to the probabilities.
  int dropout_calls = 0;
  const auto count_dropout = [&](const torch::Tensor& p) {
    ++dropout_calls;
    return p;
  };
  const torch::Tensor with_dropout = causal_attention(qkv, 2, /*dropout_due=*/true, count_dropout);
  EXPECT_EQ(dropout_calls, 1);
  const torch::Tensor without = causal_attention(qkv, 2, /*dropout_due=*/false, count_dropout);
  EXPECT_EQ(dropout_calls, 1);
  EXPECT_LT(relative_difference(without, with_dropout), 1e-6);
  // In inference (no autograd) the kernel computes the same.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(causal_attention_cpu(qkv, 2), without));
}

}  // namespace
}  // namespace bigbatch
