#pragma once
// `bigbatch verify`: the first update's window run twice from the same weights — as the plan's
// micro-steps with accumulation, and as one batch of the same samples — comparing gradients and
// the weights after the update, tensor by tensor, with a verdict. Torch-free, for the CLI.
#include <string>

#include "config/train_config.h"

namespace bigbatch {

enum class VerifyVerdict { Exact, BatchNorm, Unexpected };

struct VerifyReport {
  std::string text;
  VerifyVerdict verdict = VerifyVerdict::Exact;
};

// `break_normalisation_for_tests` runs the accumulated side with the classic per-micro-batch
// mean (EngineOptions::per_micro_batch_mean_for_tests), for verify's own tests.
VerifyReport run_verify(const TrainConfig& config, bool break_normalisation_for_tests);

}  // namespace bigbatch
