#pragma once
// The default intra-op thread count is measured, not assumed: on a 2-vCPU machine two threads
// make the cnn a little faster and the mlp at micro 32 a third slower (docs/benchmarks.md).
// Before training, a clone of the model runs a few micro-steps (forward, loss, backward) on a
// real micro-batch with each candidate count; the fastest wins. The clone keeps the real
// model's gradients and BatchNorm statistics untouched.
//
//   const auto micro_step = [&](torch::nn::Sequential& m) { ...forward, loss, backward... };
//   ThreadChoice choice = measure_fastest_thread_count(model, micro_step, /*max_threads=*/2);
//   torch::set_num_threads(choice.threads);
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

struct ThreadChoice {
  int64_t threads = 1;
  std::vector<std::pair<int64_t, double>> seconds_per_step;  // candidate -> median time
  std::string describe() const;  // "1 (measured 2.1 ms/micro-step; 2 threads 2.9 ms)"
};

// One micro-step of the run on the model given (a copy of the run's).
using ProbeStep = std::function<void(torch::nn::Sequential& model)>;
// Times `micro_step` on a copy of `model` at 1, max_threads / 2 (when over 2) and max_threads.
ThreadChoice measure_fastest_thread_count(torch::nn::Sequential& model, const ProbeStep& micro_step,
                                          int64_t max_threads);

}  // namespace bigbatch
