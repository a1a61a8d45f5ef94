#pragma once
// Loss and accuracy (RMSE for a regression) of a model on a dataset (per token, and bits per
// byte, for token rows), in
// inference mode (no autograd graph, BatchNorm on its running statistics), restoring the model's
// training mode afterwards.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "device/precision.h"

namespace bigbatch {

struct EvalResult {
  double loss = 0;      // per item (sample, or target token)
  double accuracy = 0;  // correct items
  int64_t items = 0;
  double loss_sum = 0;
  double bits_per_byte = 0;        // token data: the loss in bits per byte of text
  bool has_bits_per_byte = false;  // the split's text bytes are known (not token files)
  bool has_accuracy = true;        // false for a module that computes its own loss (no logits), and
                                   // for a regression
  bool is_regression = false;
  double rmse = 0;  // regression: the root mean squared error over every output of every sample
};

// Evaluation needs no saved activations, so it may run in larger batches than training; but not
// so large that one activation passes glibc's largest mmap threshold (32 MiB, which bigbatch
// sets): such blocks are mapped, faulted in page by page and unmapped again for every batch.
// At 1000 the cnn's first activation is 83 MiB; at 250 it is 21 MiB, and evaluating the 10,000
// test images took ~0.6 s less with 660,000 fewer page faults (measured, 2 threads).
inline constexpr int64_t kEvalBatchSize = 250;
// Token rows are evaluated in batches of this many positions (rows x seq_len): attention's
// scores grow with rows x length^2, and 250 rows of 256 tokens would hold ~1 GiB of them.
inline constexpr int64_t kEvalTokens = 16384;

// The rows of `data` one evaluation batch takes.
inline int64_t evaluation_rows(const TensorDataset& data) {
  return data.is_tokens() ? std::max<int64_t>(1, kEvalTokens / data.width()) : kEvalBatchSize;
}

// The rows of an evaluation batch during training. Under a memory budget, the training
// micro-batch (inference, with no saved activations and no gradients, always fits it), or under
// a token budget as many full rows as it holds (after any back-off); otherwise as many as
// evaluation_rows gives.
int64_t evaluation_rows_in_training(const TensorDataset& train, int64_t micro_batch,
                                    int64_t micro_batch_tokens, bool memory_budget);

EvalResult evaluate(torch::nn::Sequential& model, const TensorDataset& data, int64_t batch_size,
                    Precision precision = Precision::Fp32);

// Each sample's loss summed over its items, in `data`'s order, and their items in all, in
// inference mode: what a branch test compares between its branches (task/task.h).
struct SampleLossList {
  std::vector<double> per_sample;
  int64_t items = 0;
};
SampleLossList sample_losses(torch::nn::Sequential& model, const TensorDataset& data,
                             int64_t batch_size, Precision precision = Precision::Fp32);

// A split's figures as the records name them: "val_loss", "test_accuracy", "val_rmse",
// "val_perplexity", "val_bpb" (`tokens`: token rows).
nlohmann::json eval_record(const std::string& prefix, const EvalResult& result, bool tokens);

// The held-out splits' figures for an epoch's or an interval's record, evaluated at most once
// per step: the evaluation of an interval whose target stops the run is its epoch's record too.
class HeldOutEvaluation {
 public:
  nlohmann::json figures(int64_t step, torch::nn::Sequential& model, const DatasetSplits& data,
                         int64_t batch_size, Precision precision);
  const EvalResult& last_test() const { return last_test_; }
  const EvalResult& last_validation() const { return last_validation_; }

 private:
  int64_t evaluated_step_ = -1;  // the step last evaluated, and its figures
  nlohmann::json evaluated_;
  EvalResult last_test_;
  EvalResult last_validation_;
};

}  // namespace bigbatch
