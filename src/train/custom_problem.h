#pragma once
// A model and data that a C++ program brings to the trainer (bigbatch as a library:
// include/bigbatch/bigbatch.h, docs/library.md). The configuration names them "cpp:NAME"
// (--model and --dataset), so run directories, checkpoints and messages say what trained.
//
//   CustomProblem problem;
//   problem.make_model = [] { return torch::nn::Sequential(MyNet()); };
//   problem.data.train = TensorDataset{inputs, labels, {}, {}, classes};
//   TrainResult result = run_training(config, &problem);
#include <torch/torch.h>

#include <functional>

#include "data/dataset.h"

namespace bigbatch {

struct CustomProblem {
  // A fresh model, initialised (called once per run, and once per probe of the memory fit).
  // Each call must give the same architecture; the run's seed is set before the first.
  std::function<torch::nn::Sequential()> make_model;
  // train, and optionally validation and test: inputs [N, ...] float32, labels [N] int64,
  // `classes` set.
  DatasetSplits data;
};

}  // namespace bigbatch
