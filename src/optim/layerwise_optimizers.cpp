#include "optim/layerwise_optimizers.h"

#include <cmath>

#include "optim/optimizer.h"

namespace bigbatch {

namespace {
// Biases and normalisation scales: no trust ratio, no weight decay.
bool excluded(const torch::Tensor& p) {
  return p.dim() <= 1;
}

}  // namespace

double trust_ratio(double weight_norm, double update_norm) {
  return weight_norm > 0 && update_norm > 0 ? weight_norm / update_norm : 1.0;
}

void LarsOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_coefficient);
}

void LarsOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_coefficient);
}

void LarsParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, momentum_buffer);
}

void LarsParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_buffer);
}

Lars::Lars(const std::vector<torch::Tensor>& parameters, const LarsOptions& options)
    : Optimizer({torch::optim::OptimizerParamGroup(parameters)},
                std::make_unique<LarsOptions>(options)) {}

torch::Tensor Lars::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure)
    loss = closure();
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LarsOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      torch::Tensor d = p.grad();
      double local = 1.0;
      if (!excluded(p)) {
        const double w_norm = p.norm().item<double>();
        const double g_norm = d.norm().item<double>();
        local = o.trust_coefficient() * trust_ratio(w_norm, g_norm + o.weight_decay() * w_norm);
        if (o.weight_decay() != 0)
          d = d.add(p, o.weight_decay());
      }
      auto& slot = state_[optimizer_state_key(p)];
      if (!slot) {
        auto state = std::make_unique<LarsParamState>();
        state->momentum_buffer(torch::zeros_like(p));
        slot = std::move(state);
      }
      auto& buffer = static_cast<LarsParamState&>(*slot).momentum_buffer();
      buffer.mul_(o.momentum()).add_(d, local);
      p.add_(buffer, -o.lr());
    }
  }
  return loss;
}

void Lars::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

void Lars::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta1);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta2);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta1);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta2);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

Lamb::Lamb(const std::vector<torch::Tensor>& parameters, const LambOptions& options)
    : Optimizer({torch::optim::OptimizerParamGroup(parameters)},
                std::make_unique<LambOptions>(options)) {}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure)
    loss = closure();
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LambOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      const auto& g = p.grad();
      auto& slot = state_[optimizer_state_key(p)];
      if (!slot) {
        auto state = std::make_unique<LambParamState>();
        state->exp_avg(torch::zeros_like(p));
        state->exp_avg_sq(torch::zeros_like(p));
        slot = std::move(state);
      }
      auto& state = static_cast<LambParamState&>(*slot);
      state.step(state.step() + 1);
      state.exp_avg().mul_(o.beta1()).add_(g, 1 - o.beta1());
      state.exp_avg_sq().mul_(o.beta2()).addcmul_(g, g, 1 - o.beta2());
      const double correction1 = 1 - std::pow(o.beta1(), double(state.step()));
      const double correction2 = 1 - std::pow(o.beta2(), double(state.step()));
      torch::Tensor update = (state.exp_avg() / correction1)
                                 .div_((state.exp_avg_sq() / correction2).sqrt_().add_(o.eps()));
      double ratio = 1.0;
      if (!excluded(p)) {
        if (o.weight_decay() != 0)
          update.add_(p, o.weight_decay());
        ratio = trust_ratio(p.norm().item<double>(), update.norm().item<double>());
      }
      p.add_(update, -o.lr() * ratio);
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

void Lamb::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

}  // namespace bigbatch
