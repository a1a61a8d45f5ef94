#pragma once
// The running sums a classifier's metrics need over many batches: summed loss and correct
// predictions. On the CPU they are read straight off each finished batch (the loss's value and
// stats/prediction_counts.h over the logits), with no tensor operation; on an accelerator they
// stay device tensors, read once at the end, so nothing waits for the device in between.
//
//   PredictionTally tally;
//   tally.add(logits, summed_loss, targets);   // per micro-batch
//   double mean_loss = tally.loss_sum() / items;
//   int64_t correct = tally.correct();
#include <torch/torch.h>

#include <cstdint>

namespace bigbatch {

class PredictionTally {
 public:
  // `logits` [rows, classes], `summed_loss` the batch's loss summed over its rows (a scalar),
  // `targets` [rows] class indices.
  void add(const torch::Tensor& logits, const torch::Tensor& summed_loss,
           const torch::Tensor& targets);

  // A batch whose loss a model computed itself: no predictions to count.
  void add_loss(const torch::Tensor& summed_loss);

  // The sums so far (reading device sums waits for the device).
  double loss_sum() const;
  int64_t correct() const;

  // Starts again from these sums (0, or a window restored from a checkpoint).
  void reset(double loss_sum = 0, int64_t correct = 0);

 private:
  double host_loss_sum_ = 0;
  int64_t host_correct_ = 0;
  torch::Tensor device_loss_sum_;  // float64; undefined until a device batch arrives
  torch::Tensor device_correct_;   // int64
};

}  // namespace bigbatch
