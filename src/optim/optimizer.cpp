#include "optim/optimizer.h"

#include <cmath>
#include <optional>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "core/error.h"
#include "core/text.h"
#include "optim/fused_sgd.h"
#include "optim/layerwise_optimizers.h"

namespace bigbatch {

OptimizerSettings OptimizerSettings::from(const TrainConfig& config) {
  OptimizerSettings s;
  s.kind = config.optimizer;
  s.momentum = config.momentum;
  s.nesterov = config.nesterov && config.momentum > 0;
  s.weight_decay = config.weight_decay;
  s.adam_beta1 = config.adam_beta1;
  s.adam_beta2 = config.adam_beta2;
  s.adam_eps = config.adam_eps;
  s.lars_trust = config.lars_trust;
  return s;
}

std::string OptimizerSettings::describe() const {
  std::string text = to_string(kind);
  const std::string decay = ", weight decay " + format_significant(weight_decay);
  if (kind == OptimizerKind::Sgd || kind == OptimizerKind::Lars) {
    text += ", momentum " + format_significant(momentum);
    if (kind == OptimizerKind::Sgd && momentum > 0) {
      // Not PyTorch's default (plain momentum), so said where it cannot be missed (issue 20).
      text += nesterov ? ", Nesterov (bigbatch's default; PyTorch's SGD default is plain momentum: "
                         "--no-nesterov)"
                       : ", plain (heavy-ball) momentum";
    }
    text += decay;
    if (kind == OptimizerKind::Lars)
      text += ", trust coefficient " + format_significant(lars_trust);
  } else {
    text += ", betas " + format_significant(adam_beta1) + "/" + format_significant(adam_beta2) +
            ", eps " + format_significant(adam_eps) + decay +
            (kind == OptimizerKind::AdamW ? " (decoupled)" : "");
  }
  return text;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerSettings& s, const std::vector<torch::Tensor>& parameters) {
  // The rate given here is a placeholder: the trainer sets the scheduled rate before each step.
  if (s.kind == OptimizerKind::Lars) {
    return std::make_unique<Lars>(parameters, LarsOptions(1e-3)
                                                  .momentum(s.momentum)
                                                  .weight_decay(s.weight_decay)
                                                  .trust_coefficient(s.lars_trust));
  }
  if (s.kind == OptimizerKind::Lamb) {
    return std::make_unique<Lamb>(parameters, LambOptions(1e-3)
                                                  .beta1(s.adam_beta1)
                                                  .beta2(s.adam_beta2)
                                                  .eps(s.adam_eps)
                                                  .weight_decay(s.weight_decay));
  }
  if (s.kind == OptimizerKind::AdamW) {
    return std::make_unique<torch::optim::AdamW>(
        parameters, torch::optim::AdamWOptions(1e-3)
                        .betas(std::make_tuple(s.adam_beta1, s.adam_beta2))
                        .eps(s.adam_eps)
                        .weight_decay(s.weight_decay));
  }
  return std::make_unique<FusedSgd>(parameters, torch::optim::SGDOptions(1e-3)
                                                    .momentum(s.momentum)
                                                    .nesterov(s.nesterov)
                                                    .weight_decay(s.weight_decay));
}

namespace {
// A template, so that only the branch of this libtorch's key type is compiled.
template <typename Key>
Key state_key_of(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, void*>) {
    return impl;
  } else {
    std::ostringstream text;  // what c10::guts::to_string wrote (gone in 2.2)
    text << impl;
    return text.str();
  }
}
}  // namespace

OptimizerStateKey optimizer_state_key(const torch::Tensor& parameter) {
  return state_key_of<OptimizerStateKey>(parameter.unsafeGetTensorImpl());
}

namespace {

// One parameter's 1 / (sqrt(v / (1 - beta2^t)) + eps), as the optimizers compute it; undefined
// before it has settled.
torch::Tensor preconditioner_of(const torch::Tensor& exp_avg_sq, int64_t step, double beta2,
                                double eps) {
  if (step < kPreconditionerSettleSteps)
    return {};
  const double correction2 = 1 - std::pow(beta2, double(step));
  return (exp_avg_sq / correction2).sqrt_().add_(eps).reciprocal_();
}

}  // namespace

namespace {

// What AdamW's and LAMB's preconditioner is made of, for one parameter.
struct SecondMoment {
  torch::Tensor exp_avg_sq;
  int64_t step = 0;
  double beta2 = 0;
  double eps = 0;
};

std::optional<SecondMoment> second_moment_of(torch::optim::Optimizer& optimizer,
                                             const torch::Tensor& parameter) {
  auto& state = optimizer.state();
  const auto& groups = optimizer.param_groups();
  const auto slot = state.find(optimizer_state_key(parameter));
  if (groups.empty() || slot == state.end() || !slot->second)
    return std::nullopt;  // not stepped yet (or a parameter it does not update)
  // One group per optimizer here (make_optimizer): its options hold beta2 and eps.
  if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(slot->second.get())) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(groups.front().options());
    return SecondMoment{adamw->exp_avg_sq(), adamw->step(), std::get<1>(o.betas()), o.eps()};
  }
  if (auto* lamb = dynamic_cast<LambParamState*>(slot->second.get())) {
    const auto& o = static_cast<const LambOptions&>(groups.front().options());
    return SecondMoment{lamb->exp_avg_sq(), lamb->step(), o.beta2(), o.eps()};
  }
  return std::nullopt;
}

}  // namespace

torch::Tensor adam_preconditioner_of(torch::optim::Optimizer& optimizer,
                                     const torch::Tensor& parameter) {
  torch::NoGradGuard no_grad;
  const auto moment = second_moment_of(optimizer, parameter);
  return moment ? preconditioner_of(moment->exp_avg_sq, moment->step, moment->beta2, moment->eps)
                : torch::Tensor();
}

int64_t adam_steps_of(torch::optim::Optimizer& optimizer, const torch::Tensor& parameter) {
  const auto moment = second_moment_of(optimizer, parameter);
  return moment ? moment->step : 0;
}

std::vector<torch::Tensor> adam_preconditioner(torch::optim::Optimizer& optimizer,
                                               const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> weights;
  weights.reserve(parameters.size());
  for (const auto& p : parameters) {
    weights.push_back(adam_preconditioner_of(optimizer, p));
    if (!weights.back().defined())
      return {};
  }
  return weights;
}

std::string optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

void load_optimizer_state_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes,
                                const torch::Device& device) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), device);
  optimizer.load(archive);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(lr);
}

void set_adam_hyperparameters(torch::optim::Optimizer& optimizer, const AdamHyperparameters& adam) {
  for (auto& group : optimizer.param_groups()) {
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&group.options())) {
      adamw->betas(std::make_tuple(adam.beta1, adam.beta2)).eps(adam.eps);
    } else if (auto* lamb = dynamic_cast<LambOptions*>(&group.options())) {
      lamb->beta1(adam.beta1).beta2(adam.beta2).eps(adam.eps);
    } else {
      BB_INTERNAL_ASSERT(false, "Adam's betas set on an optimizer without them");
    }
  }
}

}  // namespace bigbatch
