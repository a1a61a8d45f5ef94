#pragma once
// The layer of a user's module (models/user_module.h) that runs the module's forward, as its
// kinds share it: train(on) sets the module's own mode too, and BatchNorm layers frozen by
// --bn-mode frozen stay in eval mode whatever train() says (after an evaluation too).
#include <torch/torch.h>

namespace bigbatch {

class UserForwardLayer : public torch::nn::Module {
 public:
  void train(bool on) override {
    set_module_mode(on);
    torch::nn::Module::train(on);
    if (batch_norm_frozen_)
      put_batch_norm_in_eval();
  }

  bool batch_norm_frozen() const { return batch_norm_frozen_; }
  void freeze_batch_norm() {
    batch_norm_frozen_ = true;
    put_batch_norm_in_eval();
  }

 protected:
  // The module's own train(on) / eval().
  virtual void set_module_mode(bool training) = 0;
  // The module's BatchNorm layers (found by their types) into eval mode.
  virtual void put_batch_norm_in_eval() = 0;

 private:
  bool batch_norm_frozen_ = false;
};

}  // namespace bigbatch
