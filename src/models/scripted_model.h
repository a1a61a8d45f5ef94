#pragma once
// A model written in PyTorch and saved with torch.jit.script(model).save("model.pt"), trained
// from C++ with no Python at run time (--model torchscript:FILE; docs/your-model.md has the
// contract and a complete example).
//
// It is a Sequential like every built-in model, so the engine, the optimizer, checkpoints,
// ranks and memory fitting treat it as one: its single layer runs the module's forward(), and
// the module's parameters and buffers are registered under their state_dict names ("fc1.weight",
// "0.bias" for a scripted nn.Sequential), the very tensors the module computes with. Weights
// files therefore load into the Python module with load_state_dict(strict=True).
//
// A tied weight (head.weight = token.weight) is one parameter: the optimizer, the gradient
// all-reduce and clipping see it once. Its second name is kept as a buffer alias of the same
// tensor, so weights files still carry every state_dict key.
//
//   auto model = load_scripted_model("model.pt");   // bigbatch::Error(Model) when it cannot
//   torch::Tensor logits = model->forward(inputs);  // the module's own forward
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace torch::jit {
struct Module;
}

namespace bigbatch {

class ScriptedForwardImpl;  // the layer that runs the module's forward()

// What a module with its own loss returns for a micro-batch: the loss summed over its items
// (a scalar with its autograd graph) and how many items that is.
struct ModuleLoss {
  torch::Tensor loss_sum;
  int64_t items = 0;
};

// A module with a loss() method: forward's logits (the first tensor when forward returns a
// tuple) and loss(outputs, targets), the loss summed over the batch's items.
struct ScoredLoss {
  torch::Tensor logits;
  torch::Tensor loss_sum;
};

class ScriptedModelImpl : public torch::nn::SequentialImpl {
 public:
  // `module` is a loaded TorchScript module; `path` names it in messages.
  ScriptedModelImpl(torch::jit::Module module, std::string path);
  ~ScriptedModelImpl() override;

  const std::string& path() const { return path_; }

  // forward(inputs, targets) returns (loss_sum, item_count) instead of logits: a custom loss.
  // The engine then takes the count from the module and divides after the reduction.
  bool computes_loss() const { return computes_loss_; }
  ModuleLoss forward_loss(const torch::Tensor& inputs, const torch::Tensor& targets);
  // forward(inputs) returns logits (or a tuple that starts with them) and the module exports
  // loss(outputs, targets), which receives what forward returned and gives the loss summed over
  // the batch's items (bigbatch counts them: samples, or target tokens). One forward pass gives
  // both the loss and the predictions that are scored.
  bool has_loss_method() const { return has_loss_method_; }
  ScoredLoss forward_and_loss(const torch::Tensor& inputs, const torch::Tensor& targets);
  // The second names of tied weights, each with the parameter it aliases.
  const std::vector<std::pair<std::string, std::string>>& aliases() const { return aliases_; }

  // BatchNorm inside the module (found by the submodules' types): their names, those still
  // normalising over the batch (training mode) only when `training_only`.
  std::vector<std::string> batch_norm_layers(bool training_only) const;
  // Running statistics normalise in training too. (Their momentum is a TorchScript constant:
  // the module keeps its own, uncorrected for accumulation.)
  void freeze_batch_norm();

  // Writes the module with its current weights (torch.jit.load reads it back), atomically.
  void save_module(const std::string& path) const;

  // A deep copy (its own weights, tied ones still tied), for probes that must not touch these.
  std::shared_ptr<torch::nn::Module> clone(
      const c10::optional<torch::Device>& device = c10::nullopt) const override;

 private:
  void register_state();

  std::shared_ptr<torch::jit::Module> module_;
  std::shared_ptr<ScriptedForwardImpl> forward_;
  std::string path_;
  bool computes_loss_ = false;
  bool has_loss_method_ = false;
  std::vector<std::pair<std::string, std::string>> aliases_;
};

// Error (Model) unless `path` exists: the first check load_scripted_model makes, which a run
// also makes before its data loads.
void check_model_file_exists(const std::string& path);
// Loads FILE and checks the contract bigbatch can see without data: a TorchScript module whose
// forward() takes the inputs (and returns logits, with a loss(outputs, targets) method or
// without) or the inputs and the targets (and returns the loss), and that has parameters.
std::shared_ptr<ScriptedModelImpl> load_scripted_model(const std::string& path);

// The scripted model inside `model`, or null for a built-in one.
ScriptedModelImpl* as_scripted(torch::nn::Module& model);
// A scripted model with its own loss: no logits, so no accuracy to report.
bool computes_own_loss(torch::nn::Module& model);
// loss.backward(seed), or loss.backward() when `seed` is undefined. A scripted module that wrote
// in place into a tensor autograd saved for backward (its targets or token ids after use)
// breaks PyTorch's contract: a model error naming it, not an internal one.
void backward_through(torch::nn::Module& model, const torch::Tensor& loss,
                      const torch::Tensor& seed = {});

}  // namespace bigbatch
