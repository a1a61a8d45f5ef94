#pragma once
// A model written in PyTorch and saved with torch.jit.script(model).save("model.pt"), trained
// from C++ with no Python at run time (--model torchscript:FILE; docs/your-model.md has the
// contract and a complete example).
//
// It is a user's module (models/user_module.h) like a Python one: a Sequential whose single
// layer runs the module's forward(), its parameters and buffers registered under their
// state_dict names.
//
//   auto model = load_scripted_model("model.pt");   // bigbatch::Error(Model) when it cannot
//   torch::Tensor logits = model->forward(inputs);  // the module's own forward
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "models/user_module.h"

namespace torch::jit {
struct Module;
}

namespace bigbatch {

class ScriptedForwardImpl;  // the layer that runs the module's forward()

class ScriptedModelImpl : public UserModuleImpl {
 public:
  // `module` is a loaded TorchScript module; `path` names it in messages.
  ScriptedModelImpl(torch::jit::Module module, std::string path);
  ~ScriptedModelImpl() override;

  const std::string& path() const { return path_; }
  const std::string& name() const override { return path_; }

  bool computes_loss() const override { return computes_loss_; }
  ModuleLoss forward_loss(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  bool has_loss_method() const override { return has_loss_method_; }
  ScoredLoss forward_and_loss(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  std::vector<std::string> layers_of(LayerKind kind, bool training_only) const override;
  // (BatchNorm's running statistics' momentum is a TorchScript constant.)
  void freeze(LayerKind kind) override;

  // Writes the module with its current weights (torch.jit.load reads it back), atomically.
  void save_module(const std::string& path) const;

  // A deep copy (its own weights, tied ones still tied), for probes that must not touch these.
  std::shared_ptr<torch::nn::Module> clone(
      const c10::optional<torch::Device>& device = c10::nullopt) const override;

 private:
  void register_scripted_state();

  std::shared_ptr<torch::jit::Module> module_;
  std::shared_ptr<ScriptedForwardImpl> forward_;
  std::string path_;
  bool computes_loss_ = false;
  bool has_loss_method_ = false;
};

// Error (Model) unless `path` exists: the first check load_scripted_model makes, which a run
// also makes before its data loads.
void check_model_file_exists(const std::string& path);
// Loads FILE and checks the contract bigbatch can see without data: a TorchScript module whose
// forward() takes the inputs (and returns logits, with a loss(outputs, targets) method or
// without) or the inputs and the targets (and returns the loss), and that has parameters.
std::shared_ptr<ScriptedModelImpl> load_scripted_model(const std::string& path);

// The scripted model inside `model`, or null for a built-in or a Python one.
ScriptedModelImpl* as_scripted(torch::nn::Module& model);

}  // namespace bigbatch
