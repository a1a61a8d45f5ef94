#pragma once
// The tasks' loss in one place: cross-entropy summed over predictions. A classifier makes one
// prediction per sample (logits [B, classes], targets [B]); a language model one per position
// (logits [B, T, vocab], targets [B, T], padding marked kIgnoreTarget and counted nowhere).
// Both become rows of one prediction each, so the loss, the correct count and the item count
// are the same code for either.
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

// Summed over the rows whose target is not kIgnoreTarget (PyTorch's ignore_index default).
inline torch::Tensor summed_cross_entropy(const PredictionRows& rows) {
  return torch::nn::functional::cross_entropy(rows.logits, rows.targets,
                                              torch::nn::functional::CrossEntropyFuncOptions()
                                                  .reduction(torch::kSum)
                                                  .ignore_index(kIgnoreTarget));
}

}  // namespace bigbatch
