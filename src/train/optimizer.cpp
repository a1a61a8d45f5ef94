#include "train/optimizer.h"

#include "train/fused_sgd.h"
#include "train/layerwise_optimizers.h"

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

std::string optimizer_state_key(const torch::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(lr);
}

}  // namespace bigbatch
