#pragma once
// --bn-mode window: BatchNorm normalises every micro-batch of an accumulation window with the
// statistics of the whole window (this rank's share of it), as one batch of that size would —
// the behaviour Darknet offers, here exact in the forward pass.
//
// Before the window's micro-steps, a statistics pass (no gradients) forwards the window's
// micro-batches layer by layer: the inputs of BatchNorm layer k are measured with layers 1..k-1
// already normalising by their pooled statistics, so every layer sees exactly what it would in
// one big batch (one partial forward pass per BatchNorm layer; ~+40% compute for cnn-bn).
// During the micro-steps the layers normalise by those statistics as constants (eval-mode
// arithmetic). What is *not* equivalent: one big batch also back-propagates through the
// statistics (each sample's gradient depends on the others through the mean and variance);
// here that term is absent, as in frozen BatchNorm, so gradients differ (measured by `bigbatch
// verify`), while the normalisation itself is exact. Running statistics move once per window,
// with the plain momentum, by the window's statistics (variance unbiased, as PyTorch).
//
//   WindowBatchNorm window_bn(model);
//   window_bn.begin(assembler, order, window);     // pooled statistics in place
//   run_micro_steps(...);                           // window_bn.suspend()/resume() around saves
//   window_bn.end(/*applied=*/true);                // running statistics restored and moved
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "batching/batch_plan.h"
#include "data/dataset.h"
#include "device/precision.h"

namespace bigbatch {

class WindowBatchNorm {
 public:
  WindowBatchNorm(torch::nn::Sequential model, double momentum, Precision precision);

  // Whether the model has BatchNorm layers at all (nothing to do otherwise).
  bool active() const { return !layers_.empty(); }

  // Measures the window's statistics and makes the BatchNorm layers normalise by them.
  void begin(BatchAssembler& assembler, const std::vector<int64_t>& order,
             const UpdateWindow& window);
  // The layers' own running statistics back in place (for a checkpoint written inside the
  // window), and the window's statistics again.
  void suspend();
  void resume();
  // Ends the window: running statistics restored, then (applied) moved by the window's
  // statistics; the layers back in training mode. Safe to call when no window is open.
  void end(bool applied);

 private:
  struct Layer {
    size_t index = 0;  // position in the Sequential
    torch::nn::Module* module = nullptr;
    torch::Tensor running_mean, running_var;  // the layer's registered buffers
    torch::Tensor batches_tracked;
    torch::Tensor saved_mean, saved_var;    // their values outside the window
    torch::Tensor window_mean, window_var;  // the window's (biased variance)
    int64_t window_count = 0;               // values per channel in the window
  };

  torch::nn::Sequential model_;
  double momentum_;
  Precision precision_;
  std::vector<Layer> layers_;
  bool open_ = false;
};

}  // namespace bigbatch
