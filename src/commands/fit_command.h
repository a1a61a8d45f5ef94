#pragma once
// `bigbatch fit`: the micro-batch search of train/micro_batch_fit.h for the configured model,
// data and optimizer under --memory-budget, as the text table and as JSON. Torch-free, for
// the CLI.
#include <cstdint>
#include <string>

#include "config/train_config.h"

namespace bigbatch {

struct FitReport {
  std::string text;
  std::string json;
  int64_t max_micro_batch = 0;
};

FitReport run_fit(const TrainConfig& config);

}  // namespace bigbatch
