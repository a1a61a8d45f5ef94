#include "batching/token_packing.h"

#include <algorithm>

#include "core/error.h"

namespace bigbatch {

TokenPacking pack_by_tokens(const int64_t* samples, int64_t count,
                            const std::vector<int64_t>& lengths, int64_t budget) {
  BB_INTERNAL_ASSERT(budget > 0, "a token budget must be positive");
  TokenPacking packing;
  packing.rows.assign(samples, samples + count);
  const auto length_of = [&](int64_t sample) {
    BB_INTERNAL_ASSERT(sample >= 0 && sample < int64_t(lengths.size()), "sample outside the data");
    return std::max<int64_t>(1, lengths[size_t(sample)]);
  };
  std::stable_sort(packing.rows.begin(), packing.rows.end(),
                   [&](int64_t a, int64_t b) { return length_of(a) > length_of(b); });
  int64_t begin = 0;
  while (begin < count) {
    // Longest first: the micro-batch's first row sets its padded width.
    const int64_t width = length_of(packing.rows[size_t(begin)]);
    const int64_t rows = std::clamp<int64_t>(budget / width, 1, count - begin);
    packing.micro_batch_sizes.push_back(rows);
    packing.padded_tokens += rows * width;
    for (int64_t i = begin; i < begin + rows; ++i)
      packing.tokens += lengths[size_t(packing.rows[size_t(i)])];
    begin += rows;
  }
  return packing;
}

}  // namespace bigbatch
