#pragma once
// 2x2 max pooling with stride 2 (the cnn models' only pooling), in one specialised loop.
// libtorch 1.13's CPU kernel for NCHW tensors is generic (any window, stride, padding and
// dilation) and scalar, and its forward took 14-19% of the cnn's training time here (perf;
// docs/benchmarks.md). This one reads each 2x2 window once, keeps the winner as a 2-bit
// position (one byte per output instead of an int64 index) and writes every input gradient in
// the backward pass instead of zeroing then scattering.
//
// Results are bit-identical to torch::max_pool2d(input, 2), gradients included: the same
// scan order and rule (a value wins when greater than the current maximum or NaN, so the first
// of equal maxima and the last NaN), the last row and column of odd sizes dropped. Tensors the
// loop does not cover (not 4-D, not fp32, not contiguous, not on the CPU) take libtorch's own
// operator.
//
//   auto pool = MaxPool2x2();
//   torch::Tensor y = pool(x);  // x: N x C x H x W -> N x C x H/2 x W/2
#include <torch/torch.h>

#include <ostream>

namespace bigbatch {

class MaxPool2x2Impl : public torch::nn::Cloneable<MaxPool2x2Impl> {
 public:
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;
};
TORCH_MODULE(MaxPool2x2);

// The function itself, for tests and for callers without a module.
torch::Tensor max_pool_2x2(const torch::Tensor& input);

}  // namespace bigbatch
