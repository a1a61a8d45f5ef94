#pragma once
// Loss and accuracy of a model on a dataset (per token, and bits per byte, for token rows), in
// inference mode (no autograd graph, BatchNorm on its running statistics), restoring the model's
// training mode afterwards.
#include <torch/torch.h>

#include "data/dataset.h"
#include "train/precision.h"

namespace bigbatch {

struct EvalResult {
  double loss = 0;      // per item (sample, or target token)
  double accuracy = 0;  // correct items
  int64_t items = 0;
  double loss_sum = 0;
  double bits_per_byte = 0;  // token data: the loss in bits per byte of text (0: not text)
};

EvalResult evaluate(torch::nn::Sequential& model, const TensorDataset& data, int64_t batch_size,
                    Precision precision = Precision::Fp32);

}  // namespace bigbatch
