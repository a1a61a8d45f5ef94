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

// `bigbatch fit`: the micro-batch search of train/micro_batch_fit.h for the configured model,
// data and optimizer under --memory-budget, as the text table and as JSON.
struct FitReport {
  std::string text;
  std::string json;
  int64_t max_micro_batch = 0;
};

FitReport run_fit(const TrainConfig& config);

// `bigbatch verify`: the first update's window run twice from the same weights — as the plan's
// micro-steps with accumulation, and as one batch of the same samples — comparing gradients and
// the weights after the update, tensor by tensor.
enum class VerifyVerdict { Exact, BatchNorm, Unexpected };
struct VerifyReport {
  std::string text;
  VerifyVerdict verdict = VerifyVerdict::Exact;
};

VerifyReport run_verify(const TrainConfig& config, bool break_normalisation_for_tests);

}  // namespace bigbatch
