#pragma once
// What a micro-batch, a window, an epoch or a run has counted: the one record of it that the
// engine, the reducer's collective, progress, checkpoints and metrics all carry.
//
// Two counts, because they differ as soon as a sample is more than one item: `samples` is what
// the batch plan cuts and the global batch counts (images, sequences); `items` is what the mean
// is taken over (samples for classification, target tokens for a language model). The loss is
// summed over items; the metric sums are the task's (correct predictions for classification).
//
//   Counts window;
//   window += Counts{/*samples=*/32, /*items=*/32, /*loss_sum=*/70.1, /*correct=*/21};
//   double mean_loss = window.mean_loss();
#include <cstdint>

namespace bigbatch {

struct Counts {
  int64_t samples = 0;  // what the plan cuts and the global batch counts
  int64_t items = 0;    // what the mean is taken over: the divisor of the mean gradient
  double loss_sum = 0;  // the loss summed over items
  int64_t correct = 0;  // correctly predicted items (classification)

  Counts& operator+=(const Counts& other) {
    samples += other.samples;
    items += other.items;
    loss_sum += other.loss_sum;
    correct += other.correct;
    return *this;
  }

  // Per item; 0 when nothing was counted.
  double mean_loss() const { return items > 0 ? loss_sum / double(items) : 0.0; }
  double accuracy() const { return items > 0 ? double(correct) / double(items) : 0.0; }
};

}  // namespace bigbatch
