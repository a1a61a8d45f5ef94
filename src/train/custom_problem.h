#pragma once
// A model and data that a program brings to the trainer: a C++ program (bigbatch as a library:
// include/bigbatch/bigbatch.h, docs/library.md) or the Python package (bigbatch.train,
// docs/python.md). The configuration names them "cpp:NAME" or "python:NAME" (--model and
// --dataset), so run directories, checkpoints and messages say what trained. A program's model
// may train on a dataset the configuration names as the command line does (--dataset
// fashion-mnist): then `data` stays empty and the run loads it.
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
  // A copy for the probes that measure the micro-batch that fits (--micro-batch auto), when
  // make_model would give the run's own model again (a Python module: the user's object, whose
  // weights the probes must not touch). Unset: make_model.
  std::function<torch::nn::Sequential()> make_probe_model;
  // train, and optionally validation and test: inputs [N, ...] float32, labels [N] int64,
  // `classes` set. Used when the configuration's dataset is the program's (cpp: or python:).
  DatasetSplits data;
};

}  // namespace bigbatch
