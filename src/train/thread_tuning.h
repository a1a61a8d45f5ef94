#pragma once
// The default intra-op thread count is measured, not assumed: on a 2-vCPU machine two threads
// make the cnn a little faster and the mlp at micro 32 a third slower (docs/benchmarks.md).
// Before training, a clone of the model runs a few forward/backward passes on a real
// micro-batch with each candidate count; the fastest wins. The clone keeps the real model's
// gradients and BatchNorm statistics untouched.
//
//   ThreadChoice choice = measure_fastest_thread_count(model, batch, /*max_threads=*/2);
//   torch::set_num_threads(choice.threads);
#include <torch/torch.h>

#include <string>
#include <vector>

#include "data/dataset.h"
#include "task/task.h"

namespace bigbatch {

struct ThreadChoice {
  int64_t threads = 1;
  std::vector<std::pair<int64_t, double>> seconds_per_step;  // candidate -> median time
  std::string describe() const;  // "1 (measured 2.1 ms/micro-step; 2 threads 2.9 ms)"
};

// Times a micro-step of `task` (forward, summed loss, backward) on a copy of `model`.
ThreadChoice measure_fastest_thread_count(torch::nn::Sequential& model, const Task& task,
                                          const Batch& batch, int64_t max_threads);

}  // namespace bigbatch
