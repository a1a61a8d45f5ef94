#include "stats/prediction_counts.h"

#include <cmath>

namespace bigbatch {

int64_t count_correct_predictions(const float* logits, int64_t rows, int64_t classes,
                                  const int64_t* targets) {
  int64_t correct = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const float* values = logits + row * classes;
    int64_t best = 0;
    for (int64_t k = 1; k < classes && !std::isnan(values[best]); ++k) {
      // Strictly larger keeps the first maximum; a NaN wins and ends the search.
      if (values[k] > values[best] || std::isnan(values[k]))
        best = k;
    }
    correct += best == targets[row] ? 1 : 0;
  }
  return correct;
}

}  // namespace bigbatch
