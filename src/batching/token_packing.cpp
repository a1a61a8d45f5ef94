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

TokenCutEpoch cut_epoch_by_tokens(const BatchPlan& plan, const EpochPlan& epoch,
                                  const std::vector<int64_t>& order,
                                  const std::vector<int64_t>& lengths, int64_t budget,
                                  int64_t rank) {
  TokenCutEpoch cut;
  for (int64_t update = 0; update < epoch.updates_per_epoch; ++update) {
    const UpdateWindow window = window_for_update(plan, epoch, update, rank);
    BB_INTERNAL_ASSERT(window.rank_begin + window.rank_size <= int64_t(order.size()),
                       "a window outside the epoch's order");
    const TokenPacking packing =
        pack_by_tokens(order.data() + window.rank_begin, window.rank_size, lengths, budget);
    const auto steps = static_cast<int64_t>(packing.micro_batch_sizes.size());
    cut.micro_steps += steps;
    cut.fewest_per_window = update == 0 ? steps : std::min(cut.fewest_per_window, steps);
    cut.most_per_window = std::max(cut.most_per_window, steps);
    cut.tokens += packing.tokens;
    cut.padded_tokens += packing.padded_tokens;
  }
  return cut;
}

}  // namespace bigbatch
