#pragma once
// Correct predictions of a classifier, counted on the host from its logits: the sample's
// predicted class is its largest logit, chosen exactly as torch.argmax chooses (the first of
// equal maxima; NaN counts as larger than any number, so a NaN row predicts its first NaN).
// The trainer counts every micro-batch on the CPU this way: four tiny tensor operations
// (argmax, eq, sum, add) cost 20-30 us of dispatch per micro-step, 3% of one at micro-batch
// 16, and the loop below costs well under a microsecond (bench/engine_overhead).
//
//   int64_t correct = count_correct_predictions(logits, /*rows=*/16, /*classes=*/10, targets);
#include <cstdint>

namespace bigbatch {

// `logits` holds rows x classes floats, row after row; `targets` one class index per row.
int64_t count_correct_predictions(const float* logits, int64_t rows, int64_t classes,
                                  const int64_t* targets);

}  // namespace bigbatch
