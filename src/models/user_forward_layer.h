#pragma once
// The layer of a user's module (models/user_module.h) that runs the module's forward, as its
// kinds share it: train(on) sets the module's own mode too, and the kinds of layers frozen (by
// --bn-mode frozen: BatchNorm; by verify: dropout) stay in eval mode whatever train() says
// (after an evaluation too).
#include <torch/torch.h>

#include <set>

#include "models/user_module.h"

namespace bigbatch {

class UserForwardLayer : public torch::nn::Module {
 public:
  void train(bool on) override {
    set_module_mode(on);
    torch::nn::Module::train(on);
    for (const LayerKind kind : frozen_)
      put_in_eval(kind);
  }

  const std::set<LayerKind>& frozen() const { return frozen_; }
  void freeze(LayerKind kind) {
    frozen_.insert(kind);
    put_in_eval(kind);
  }

 protected:
  // The module's own train(on) / eval().
  virtual void set_module_mode(bool training) = 0;
  // The module's layers of `kind` (found by their types) into eval mode.
  virtual void put_in_eval(LayerKind kind) = 0;

 private:
  std::set<LayerKind> frozen_;
};

}  // namespace bigbatch
