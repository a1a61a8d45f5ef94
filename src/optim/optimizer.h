#pragma once
// Optimizers with PyTorch's semantics (libtorch's SGD, updated in one pass per parameter by
// optim/fused_sgd.h, and AdamW; LARS and LAMB in optim/layerwise_optimizers.h), built from
// typed settings, plus the one operation the engine needs beyond step(): setting the rate for
// the next update. They act once per update, on the accumulated mean gradient.
//
//   auto optimizer = make_optimizer(settings, model->parameters());
//   set_learning_rate(*optimizer, schedule.lr_at(step));
//   optimizer->step();
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "schedule/lr_schedule.h"

namespace bigbatch {

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::Sgd;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double lars_trust = 0.001;

  static OptimizerSettings from(const TrainConfig& config);
  // The start line: "sgd, momentum 0.9, Nesterov (bigbatch's default; ...), weight decay 5e-4".
  std::string describe() const;
};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const OptimizerSettings& settings, const std::vector<torch::Tensor>& parameters);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);
// AdamW's (or LAMB's) betas and eps for the next step (--adam-sqrt-adjust at the update's batch).
// The moments are kept: like a PyTorch loop that sets param_groups' betas, the next step's
// averages and bias corrections use the new values.
void set_adam_hyperparameters(torch::optim::Optimizer& optimizer, const AdamHyperparameters& adam);

// AdamW's and LAMB's diagonal preconditioner as it stands, one tensor per parameter of
// `parameters`: 1 / (sqrt(v / (1 - beta2^t)) + eps), what the next step divides the (first
// moment of the) gradient by. The noise scale of the gradient times it is the noise of the
// update's direction (Pollux, Qiao et al. 2021), not of the raw gradient. Empty when the
// optimizer has none, or before its kPreconditionerSettleSteps-th step: from a handful of
// gradients the second moment weights a coordinate whose first gradients were near 0 by up to
// 1 / eps, and those first norms (measured here at 1e4 times the later ones) would rule the
// noise scale's averages for hundreds of updates.
inline constexpr int64_t kPreconditionerSettleSteps = 10;
std::vector<torch::Tensor> adam_preconditioner(torch::optim::Optimizer& optimizer,
                                               const std::vector<torch::Tensor>& parameters);
// One parameter's (undefined as above); and the steps its moments have taken (0: none).
torch::Tensor adam_preconditioner_of(torch::optim::Optimizer& optimizer,
                                     const torch::Tensor& parameter);
int64_t adam_steps_of(torch::optim::Optimizer& optimizer, const torch::Tensor& parameter);

// The optimizer's state in torch's archive format (checkpoints, snapshots, the ranks' shares
// of a sharded state), and back onto `device`.
std::string optimizer_state_bytes(const torch::optim::Optimizer& optimizer);
void load_optimizer_state_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes,
                                const torch::Device& device);

// The key of a parameter's entry in a libtorch optimizer's state, as libtorch's own optimizers
// write it (so checkpoints hold our optimizers' state the same way): the address of its
// TensorImpl as text in libtorch 1.13, the address itself from 2.2 on.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
OptimizerStateKey optimizer_state_key(const torch::Tensor& parameter);

}  // namespace bigbatch
