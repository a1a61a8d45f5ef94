#pragma once
// `bigbatch verify`: the first update's window run twice from the same weights — as the plan's
// micro-steps with accumulation, and as one batch of the same samples — comparing gradients and
// the weights after the update, tensor by tensor, with a verdict. A third run of the window as
// one batch in float64 says which fp32 side rounds closer to the mathematics both compute.
// Dropout is turned off on every side (its masks are random draws, which a split draws in
// another order), and the report says so. Torch-free, for the CLI.
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace bigbatch {

enum class VerifyVerdict { Exact, BatchNorm, Unexpected };

// One parameter's differences between the two sides: its mean gradient and its weights after
// the update, largest absolute and relative to the tensor's largest magnitude.
struct VerifyDifference {
  std::string name;
  double gradient_max_abs = 0;
  double gradient_relative = 0;
  double weight_max_abs = 0;
  double weight_relative = 0;
  // Each fp32 side's mean gradient against the float64 one (relative), when it was computed.
  std::optional<double> accumulated_vs_float64;
  std::optional<double> whole_vs_float64;
};

struct VerifyReport {
  std::string text;
  VerifyVerdict verdict = VerifyVerdict::Exact;
  std::vector<VerifyDifference> differences;  // per parameter, in the model's order
  double largest_relative = 0;
  std::vector<std::string> dropout_off;  // dropout layers turned off for the comparison
};

struct CustomProblem;  // train/custom_problem.h

// `break_normalisation_for_tests` runs the accumulated side with the classic per-micro-batch
// mean (EngineOptions::per_micro_batch_mean_for_tests), for verify's own tests. `problem`: a
// program's model (both sides are built by its make_probe_model, copies that leave the
// program's own module alone) and, for a dataset named cpp: or python:, its data.
VerifyReport run_verify(const TrainConfig& config, bool break_normalisation_for_tests,
                        const CustomProblem* problem = nullptr);

}  // namespace bigbatch
