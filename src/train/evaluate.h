#pragma once
// Loss and accuracy of a model on a dataset, in inference mode (no autograd graph, BatchNorm
// on its running statistics), restoring the model's training mode afterwards.
#include <torch/torch.h>

#include "data/dataset.h"
#include "train/precision.h"

namespace bigbatch {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t items = 0;
};

EvalResult evaluate(torch::nn::Sequential& model, const TensorDataset& data, int64_t batch_size,
                    Precision precision = Precision::Fp32);

}  // namespace bigbatch
