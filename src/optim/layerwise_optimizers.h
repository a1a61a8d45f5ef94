#pragma once
// Layer-wise adaptive optimizers for large batches (formulas: ../shared/LARGE_BATCH.md, 5).
// Both scale each parameter tensor's step by a trust ratio ||w|| / ||update||, so a layer's
// step is a set fraction of its weights whatever the scale of its gradient.
//
// LARS (You et al. 2017), in PyTorch's momentum form so a changing rate (warmup) needs no
// momentum correction (Goyal et al.'s remark 2):
//   d = g + wd w;  local = trust_coefficient ||w|| / (||g|| + wd ||w||);
//   v = momentum v + local d;  w -= lr v
// LAMB (You et al. 2019), Adam's direction with the decay added before the trust ratio:
//   m, v: Adam's moments, bias-corrected;  u = m / (sqrt(v) + eps) + wd w;
//   w -= lr (||w|| / ||u||) u
// Tensors of one dimension or less (biases, normalisation scales) are excluded from the
// adaptation and from weight decay, as in the papers' reference setups; a zero norm (fresh
// zero-initialised weights, a zero update) falls back to a ratio of 1. State is serialised
// like libtorch's own optimizers, so checkpoints hold it.
#include <torch/torch.h>

#include <vector>

namespace bigbatch {

struct LarsOptions : public torch::optim::OptimizerCloneableOptions<LarsOptions> {
  LarsOptions(double lr = 0.1) : lr_(lr) {}  // NOLINT: libtorch constructs options from a rate
  TORCH_ARG(double, lr);
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, trust_coefficient) = 0.001;

 public:  // TORCH_ARG leaves the section private
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LarsParamState : public torch::optim::OptimizerCloneableParamState<LarsParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lars : public torch::optim::Optimizer {
 public:
  Lars(const std::vector<torch::Tensor>& parameters, const LarsOptions& options);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: libtorch constructs options from a rate
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lamb : public torch::optim::Optimizer {
 public:
  Lamb(const std::vector<torch::Tensor>& parameters, const LambOptions& options);
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

// ||w|| / ||u||, or 1 when either norm is zero.
double trust_ratio(double weight_norm, double update_norm);

}  // namespace bigbatch
