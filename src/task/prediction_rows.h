#pragma once
// The tasks' loss in one place: cross-entropy summed over predictions. A classifier makes one
// prediction per sample (logits [B, classes], targets [B]); a language model one per position
// (logits [B, T, vocab], targets [B, T], padding marked kIgnoreTarget and counted nowhere).
// Both become rows of one prediction each, so the loss, the correct count and the item count
// are the same code for either. A regression (float targets) has no predictions to count: its
// loss is the summed squared error.
//
//   PredictionRows rows = prediction_rows(logits, targets);
//   torch::Tensor loss_sum = summed_cross_entropy(rows);
#include <torch/torch.h>

#include "data/text_corpus.h"

namespace bigbatch {

struct PredictionRows {
  torch::Tensor logits;   // [rows, classes]
  torch::Tensor targets;  // [rows]
};

inline PredictionRows prediction_rows(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (logits.dim() == 2)
    return {logits, targets};
  return {logits.reshape({-1, logits.size(-1)}), targets.reshape({-1})};
}

// Summed over the rows whose target is not kIgnoreTarget (PyTorch's ignore_index default);
// `label_smoothing` as PyTorch's (0: the plain cross-entropy).
inline torch::Tensor summed_cross_entropy(const PredictionRows& rows,
                                          double label_smoothing = 0.0) {
  return torch::nn::functional::cross_entropy(rows.logits, rows.targets,
                                              torch::nn::functional::CrossEntropyFuncOptions()
                                                  .reduction(torch::kSum)
                                                  .ignore_index(kIgnoreTarget)
                                                  .label_smoothing(label_smoothing));
}

// Regression (float targets [B] or [B, K]): the squared error summed over samples and outputs,
// so that the mean over the window's samples is the per-sample sum of squared errors (PyTorch's
// MSELoss(reduction='sum') / samples; for one output, the mean squared error). `output` is the
// model's [B, K] ([B, 1] for targets [B]).
inline torch::Tensor summed_squared_error(const torch::Tensor& output,
                                          const torch::Tensor& targets) {
  return (output.reshape(targets.sizes()) - targets.to(output.scalar_type())).square().sum();
}

// The task's summed loss of a model's output: cross-entropy for class or token targets, the
// squared error for float (regression) targets.
inline torch::Tensor summed_task_loss(const torch::Tensor& output, const torch::Tensor& targets) {
  if (targets.is_floating_point())
    return summed_squared_error(output, targets);
  return summed_cross_entropy(prediction_rows(output, targets));
}

}  // namespace bigbatch
