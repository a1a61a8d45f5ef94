#pragma once
// libtorch's SGD with its update made in one pass over each parameter on the CPU. Same options,
// same state (the momentum buffer), same checkpoint format, same mathematics:
//   d = g + weight_decay p;  b = momentum b + (1 - dampening) d;
//   d = nesterov ? d + momentum b : b;  p -= lr d
// torch::optim::SGD makes each of those lines a separate tensor operation: up to five passes
// over each tensor and two temporaries per step (weight decay, Nesterov). Here one loop reads
// g, p and b once and writes p and b once, split across the intra-op threads. Results equal
// libtorch's to float rounding (the order of operations is kept; where libtorch's vector
// kernels fuse a multiply and an add, this loop may round twice). The first step of each
// parameter (which creates its momentum buffer as a copy of d) and tensors the loop does not
// cover (not fp32, not contiguous, not on the CPU) take libtorch's own operations.
//
//   FusedSgd sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
//   sgd.step();
#include <torch/torch.h>

#include <vector>

namespace bigbatch {

class FusedSgd : public torch::optim::SGD {
 public:
  FusedSgd(const std::vector<torch::Tensor>& parameters, const torch::optim::SGDOptions& options)
      : torch::optim::SGD(parameters, options) {}
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace bigbatch
