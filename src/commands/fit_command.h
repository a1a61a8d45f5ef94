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

// The search up to a rank's share of the global batch over `world_size` ranks; progress on
// stderr as --progress says (a line rewritten in place on a terminal: the table is the record).
FitReport run_fit(const TrainConfig& config, int64_t world_size = 1);

}  // namespace bigbatch
