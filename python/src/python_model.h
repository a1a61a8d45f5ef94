#pragma once
// A live torch.nn.Module from the user's Python process as the engine's model (bigbatch.train):
// a user's module (models/user_module.h) whose one layer calls the module in Python. Its
// parameters and buffers are registered under their state_dict names as the very tensors the
// module holds, so the engine's optimizer trains the user's object in place, and when train()
// returns the module holds the trained weights; checkpoints and weights.safetensors carry its
// state_dict keys.
//
// The GIL is taken only to call Python (forward, the loss, train()/eval(), a copy); the engine
// runs everything else without it. Python's exceptions in the module become one Model error
// naming the module, except an out-of-memory, which stays one (the trainer backs off), and a
// KeyboardInterrupt, which reaches Python again as itself.
//
//   auto model = std::make_shared<PythonModelImpl>(PythonModule{module, loss, false, "python:Net"},
//                                                  parameters, buffers);
#include <pybind11/pybind11.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "models/user_module.h"

namespace bigbatch {

// What the engine is given of the user's module.
struct PythonModule {
  pybind11::object module;  // the torch.nn.Module
  pybind11::object loss;    // loss(outputs, targets) -> summed loss, or None
  // forward(inputs, targets) returns (loss_sum, items) itself.
  bool computes_loss = false;
  // None, or inputs_of(inputs) -> the batch the module takes, as a dict passed as
  // forward(**batch) (Hugging Face's way) or one object: the engine's inputs are then the
  // samples' indices, and the package gathers their tensors.
  pybind11::object inputs_of = pybind11::none();
  std::string name;  // "python:Net", for messages and the run's config.toml
};

// The module shared by the engine's model factories: copies of the pointer touch no Python
// reference counts (the engine copies its factories without the GIL), and the last one lets the
// objects go with the GIL held.
std::shared_ptr<PythonModule> share_python_module(PythonModule module);

class PythonForwardImpl;

class PythonModelImpl : public UserModuleImpl {
 public:
  // `parameters` and `buffers` as the module's state_dict(keep_vars=True) names them (a tied
  // weight under each of its names).
  PythonModelImpl(PythonModule module, const NamedTensorList& parameters,
                  const NamedTensorList& buffers);
  ~PythonModelImpl() override;

  const std::string& name() const override;
  bool computes_loss() const override;
  ModuleLoss forward_loss(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  bool has_loss_method() const override;
  ScoredLoss forward_and_loss(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  std::vector<std::string> layers_of(LayerKind kind, bool training_only) const override;
  void freeze(LayerKind kind) override;

  // A deep copy of the Python module (copy.deepcopy, without gradient tracking), for probes
  // that must not touch the user's weights.
  std::shared_ptr<torch::nn::Module> clone(
      const c10::optional<torch::Device>& device = c10::nullopt) const override;

 private:
  std::shared_ptr<PythonForwardImpl> forward_;
};

// The model for `module` as the engine takes it: a Sequential over a PythonModelImpl.
torch::nn::Sequential python_model(const PythonModule& module);
// A probe's copy of `module` (copy.deepcopy), as python_model gives it.
torch::nn::Sequential python_model_copy(const PythonModule& module);

}  // namespace bigbatch
