#pragma once
// `bigbatch train`: the fit loop (epochs, stopping), driving the accumulation engine
// (train/accumulation_engine.h) and the observers: metrics.jsonl, progress, evaluation and
// weights. The header is torch-free so the CLI compiles without libtorch's headers.
//
//   TrainConfig config;  config.model = "mlp";  config.global_batch = 1024;
//   TrainResult result = run_training(config);
//   // result.run_dir holds config.toml, plan.txt, metrics.jsonl, weights.safetensors
#include <cstdint>
#include <string>

#include "config/train_config.h"

namespace bigbatch {

struct TrainResult {
  std::string run_dir;
  bool is_main_rank = true;  // only rank 0 writes the run directory and evaluates
  int64_t updates = 0;
  int64_t samples_seen = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  double train_seconds = 0;  // the training loop, evaluation excluded
  double total_seconds = 0;  // everything, data loading included
  double samples_per_s = 0;  // training samples over train_seconds
};

TrainResult run_training(const TrainConfig& config);

}  // namespace bigbatch
