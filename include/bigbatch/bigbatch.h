#pragma once
// bigbatch as a C++ library: a program with its own torch::nn::Module and its own data trains
// with the engine behind `bigbatch train` — the exact mean over the effective batch, the batch
// plan, LR scaling, warmup and schedules in updates, the gradient noise scale, checkpoints and
// bit-identical resume, memory fitting and out-of-memory back-off, data parallelism when
// launched by `bigbatch launch`. docs/library.md has the guide; examples/custom_model a
// complete program, built and run by the tests against the installed package:
//
//   find_package(bigbatch REQUIRED)                       # CMakeLists.txt
//   target_link_libraries(app PRIVATE bigbatch::bigbatch)
//
//   bigbatch::TrainConfig config;                         // every `bigbatch train` flag is a field
//   config.model = "cpp:my-net";  config.dataset = "cpp:my-data";
//   config.global_batch = 256;  config.micro_batch = 32;
//   bigbatch::CustomProblem problem;
//   problem.make_model = [] { return torch::nn::Sequential(MyNet()); };
//   problem.data.train = {inputs, labels, {}, {}, /*classes=*/10};
//   bigbatch::TrainResult result = bigbatch::train(config, problem);
#include <torch/torch.h>

#include "config/option_table.h"   // load_toml_config: a config.toml into a TrainConfig
#include "config/train_config.h"   // TrainConfig
#include "core/error.h"            // bigbatch::Error: what was wrong and how to fix it
#include "data/dataset.h"          // TensorDataset, DatasetSplits
#include "train/custom_problem.h"  // CustomProblem
#include "train/trainer.h"         // TrainResult, run_training

namespace bigbatch {

inline constexpr const char* kVersion = "0.1.0";

// Trains `problem` as configured; throws bigbatch::Error for a configuration, plan or data the
// user can fix. The run directory (config.out) is written as by `bigbatch train`.
inline TrainResult train(const TrainConfig& config, const CustomProblem& problem) {
  return run_training(config, &problem);
}

}  // namespace bigbatch
