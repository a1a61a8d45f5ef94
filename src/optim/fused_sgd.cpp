#include "optim/fused_sgd.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>

#include "optim/optimizer.h"

namespace bigbatch {

namespace {

bool loop_covers(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() &&
         !t.is_sparse();
}

struct Coefficients {
  float weight_decay;
  float momentum;
  float keep;  // 1 - dampening
  float lr;
  bool nesterov;
};

// The update of elements [begin, end): the arithmetic of libtorch's SGD, line by line.
void update_range(float* __restrict p, const float* __restrict g, float* __restrict b,
                  const Coefficients& c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float d = g[i];
    if (c.weight_decay != 0.0F)
      d = d + c.weight_decay * p[i];
    const float buffer = c.momentum * b[i] + c.keep * d;
    b[i] = buffer;
    d = c.nesterov ? d + c.momentum * buffer : buffer;
    p[i] = p[i] - c.lr * d;
  }
}

// Parts of at least this many elements per thread: below it, waking a thread costs more than
// the loop (a few microseconds of memory traffic).
constexpr int64_t kGrainSize = 1 << 15;

}  // namespace

torch::Tensor FusedSgd::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      const torch::Tensor& grad = p.grad();
      auto slot = state_.find(optimizer_state_key(p));
      if (o.momentum() != 0 && slot != state_.end()) {
        torch::Tensor& buffer =
            static_cast<torch::optim::SGDParamState&>(*slot->second).momentum_buffer();
        if (loop_covers(p) && loop_covers(grad) && loop_covers(buffer) &&
            buffer.numel() == p.numel() && grad.numel() == p.numel()) {
          const Coefficients c{
              static_cast<float>(o.weight_decay()), static_cast<float>(o.momentum()),
              static_cast<float>(1 - o.dampening()), static_cast<float>(o.lr()), o.nesterov()};
          float* weights = p.data_ptr<float>();
          const float* gradient = grad.data_ptr<float>();
          float* momentum = buffer.data_ptr<float>();
          at::parallel_for(0, p.numel(), kGrainSize, [&](int64_t begin, int64_t end) {
            update_range(weights, gradient, momentum, c, begin, end);
          });
          // Written through pointers: tell autograd, as an in-place operation would.
          torch::autograd::impl::bump_version(p);
          continue;
        }
      }
      // libtorch's own operations, for a first step and for tensors the loop does not cover.
      torch::Tensor d = grad;
      if (o.weight_decay() != 0)
        d = d.add(p, o.weight_decay());
      if (o.momentum() != 0) {
        torch::Tensor buffer;
        if (slot == state_.end()) {
          buffer = torch::clone(d).detach();
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(buffer);
          state_[optimizer_state_key(p)] = std::move(state);
        } else {
          buffer = static_cast<torch::optim::SGDParamState&>(*slot->second).momentum_buffer();
          buffer.mul_(o.momentum()).add_(d, 1 - o.dampening());
        }
        d = o.nesterov() ? d.add(buffer, o.momentum()) : buffer;
      }
      p.add_(d, -o.lr());
    }
  }
  return loss;
}

}  // namespace bigbatch
