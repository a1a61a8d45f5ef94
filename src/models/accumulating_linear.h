#pragma once
// A fully connected layer whose backward adds its weight and bias gradients straight into their
// .grad (a GEMM with beta = 1: grad += grad_out^T x input) instead of returning fresh gradients
// for autograd to add: Megatron-LM's "gradient accumulation fusion". Under accumulation each
// micro-step after the first otherwise allocates the gradient, zeroes it (the GEMM's beta = 0),
// writes it and reads it back to add it; fused, the GEMM adds in place. Measured for the mlp's
// first layer (784 -> 512) on one thread: 142 us instead of 360 us per micro-batch of 16.
//
// Same parameters, names ("weight", "bias") and initialisation as torch::nn::Linear, so weights
// files and seeds are unchanged; with fusion off (set_gradient_accumulation_fusion) it is
// plain F::linear. Fusion needs no autocast (it keeps fp32 gradients of fp32 weights): the
// engine turns it off under bf16. A fused step hands autograd no weight gradient, but the
// weight's gradient accumulator still runs after it, so hooks there (the multi-rank reducer's
// readiness signal) fire once the gradient is final, as they do unfused.
//
//   auto layer = AccumulatingLinear(784, 512);
//   layer(x1).sum().backward();  // weight.grad = g1
//   layer(x2).sum().backward();  // weight.grad += g2, inside the GEMM
#include <torch/torch.h>

#include <cstdint>
#include <ostream>

namespace bigbatch {

class AccumulatingLinearImpl : public torch::nn::Cloneable<AccumulatingLinearImpl> {
 public:
  AccumulatingLinearImpl(int64_t in_features, int64_t out_features);
  explicit AccumulatingLinearImpl(const torch::nn::LinearOptions& options);

  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  torch::nn::LinearOptions options;
  torch::Tensor weight;
  torch::Tensor bias;
  bool fuse_gradient_accumulation = true;
};
TORCH_MODULE(AccumulatingLinear);

// Turns fusion on or off in every AccumulatingLinear of `model`; returns how many there are.
int64_t set_gradient_accumulation_fusion(torch::nn::Module& model, bool enabled);

}  // namespace bigbatch
