#pragma once
// A module the user wrote, trained as a model: a TorchScript file (--model torchscript:FILE,
// models/scripted_model.h) or, through the Python package, a live torch.nn.Module
// (python/src/python_model.h). Either is a Sequential like every built-in model, so the engine,
// the optimizer, checkpoints, ranks and memory fitting treat it as one: its single layer runs
// the module's forward(), and the module's parameters and buffers are registered under their
// state_dict names ("fc1.weight", "0.bias"), the very tensors the module computes with. Weights
// files therefore load into the Python module with load_state_dict(strict=True).
//
// What the task (task/task.h) asks of it beyond forward(): whether it computes its own loss
// (forward(inputs, targets) -> (loss_sum, items)) or gives one beside its logits
// (loss(outputs, targets) -> loss_sum), and where its BatchNorm and dropout layers are.
//
//   if (UserModuleImpl* module = as_user_module(*model))
//     if (module->computes_loss()) ...            // no logits: nothing to score
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

// What a module with its own loss returns for a micro-batch: the loss summed over its items
// (a scalar with its autograd graph) and how many items that is.
struct ModuleLoss {
  torch::Tensor loss_sum;
  int64_t items = 0;
};

// A module with a loss beside forward: forward's logits (the first tensor when forward returns
// a tuple) and loss(outputs, targets), the loss summed over the batch's items.
struct ScoredLoss {
  torch::Tensor logits;
  torch::Tensor loss_sum;
};

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;

// Layers whose arithmetic in training depends on more than the sample: BatchNorm normalises
// over the batch, dropout draws random masks (a split of a batch draws them in another order).
enum class LayerKind { BatchNorm, Dropout };

class UserModuleImpl : public torch::nn::SequentialImpl {
 public:
  // How messages name the module: its file, or its Python class.
  virtual const std::string& name() const = 0;

  // forward(inputs, targets) returns (loss_sum, item_count) instead of logits: a custom loss.
  // The engine then takes the count from the module and divides after the reduction.
  virtual bool computes_loss() const = 0;
  virtual ModuleLoss forward_loss(const torch::Tensor& inputs, const torch::Tensor& targets) = 0;
  // forward(inputs) returns logits (or a tuple that starts with them) and a loss(outputs,
  // targets) receives what forward returned and gives the loss summed over the batch's items
  // (bigbatch counts them: samples, or target tokens). One forward pass gives both the loss and
  // the predictions that are scored.
  virtual bool has_loss_method() const = 0;
  virtual ScoredLoss forward_and_loss(const torch::Tensor& inputs,
                                      const torch::Tensor& targets) = 0;

  // The module's layers of a kind (found by the submodules' types; dropout only where its
  // probability is above 0): their names, only those in training mode when `training_only`.
  virtual std::vector<std::string> layers_of(LayerKind kind, bool training_only) const = 0;
  // The kind's layers kept in eval mode whatever train() says: BatchNorm's running statistics
  // normalise in training too (their momentum is the module's own, uncorrected for
  // accumulation); dropout passes its inputs through.
  virtual void freeze(LayerKind kind) = 0;

  // The second names of tied weights, each with the parameter it aliases.
  const std::vector<std::pair<std::string, std::string>>& aliases() const { return aliases_; }

 protected:
  // Registers the module's state under its dotted names, nested as in its state_dict. A
  // parameter listed twice (a tied weight: the same tensor under two names) is one parameter,
  // seen once by the optimizer, the all-reduce and clipping; its second name is a buffer alias
  // of the same tensor, so weights files still carry every state_dict key.
  void register_state(const NamedTensorList& parameters, const NamedTensorList& buffers);

 private:
  std::vector<std::pair<std::string, std::string>> aliases_;
};

// The checks of what a user's module returned, shared by the kinds of module. A module's
// forward(inputs, targets), as the checks see it: a pair (or else what it was: "one tensor",
// "a list"), its first element if a tensor, its second if an integer (or a one-element integer
// tensor).
struct ReturnedOwnLoss {
  bool pair = false;
  bool one_tensor = false;
  std::string kind;  // what it was, when not a pair
  torch::Tensor loss_sum;
  std::optional<int64_t> items;
};
// The loss and its items, or Error (Model) naming what breaks the contract.
ModuleLoss checked_own_loss(const std::string& name, const ReturnedOwnLoss& returned);
// loss(outputs, targets)'s result (undefined when not a tensor; `kind` says what it was), or
// Error (Model) unless it is a floating-point scalar.
torch::Tensor checked_summed_loss(const std::string& name, const torch::Tensor& loss,
                                  const std::string& kind);
// "[16, 1, 28, 28] float32", "[8, 49] int64 token ids": inputs, as errors describe them.
std::string describe_inputs(const torch::Tensor& inputs);

// The user's module inside `model`, or null for a built-in one.
UserModuleImpl* as_user_module(torch::nn::Module& model);
// A user's module with its own loss: no logits, so no accuracy to report.
bool computes_own_loss(torch::nn::Module& model);
// loss.backward(seed), or loss.backward() when `seed` is undefined. A user's module that wrote
// in place into a tensor autograd saved for backward (its targets or token ids after use)
// breaks PyTorch's contract: a model error naming it, not an internal one.
void backward_through(torch::nn::Module& model, const torch::Tensor& loss,
                      const torch::Tensor& seed = {});

}  // namespace bigbatch
