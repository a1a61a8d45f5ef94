#pragma once
// --micro-batch-tokens: micro-batches cut by tokens instead of by rows. The window's samples are
// fixed by the plan (invariant 1); inside it, this rank's share is sorted by length, longest
// first, and cut greedily into micro-batches whose padded size (rows x their longest) stays
// within the budget. Memory is then bounded by tokens, not by a row count that must fit the
// longest case, and padding is small because rows of like length travel together. The update
// is the same for every packing: the mean is over the window's tokens, whatever the cut.
//
//   TokenPacking p = pack_by_tokens(order.data() + window.rank_begin, window.rank_size,
//                                   lengths, /*budget=*/4096);
//   p.rows;               // the share's samples, in the order they are fed
//   p.micro_batch_sizes;  // rows per micro-batch, in that order
#include <cstdint>
#include <vector>

#include "batching/batch_plan.h"

namespace bigbatch {

struct TokenPacking {
  std::vector<int64_t> rows;
  std::vector<int64_t> micro_batch_sizes;
  int64_t tokens = 0;         // target tokens of the rows
  int64_t padded_tokens = 0;  // positions computed: sum over micro-batches of rows x longest
};

// `samples` (count of them) index `lengths`. A row longer than the budget travels alone.
// Equal lengths keep their order in `samples`, so the packing is a function of the window.
TokenPacking pack_by_tokens(const int64_t* samples, int64_t count,
                            const std::vector<int64_t>& lengths, int64_t budget);

// An epoch's windows cut by tokens on one rank: the micro-steps they take (the plan's
// accumulation steps are nominal under a token budget) and the padding they compute.
struct TokenCutEpoch {
  int64_t micro_steps = 0;
  int64_t fewest_per_window = 0;
  int64_t most_per_window = 0;
  int64_t tokens = 0;
  int64_t padded_tokens = 0;
};

// `order`: the epoch's samples (data/sampler.h), indexing `lengths`.
TokenCutEpoch cut_epoch_by_tokens(const BatchPlan& plan, const EpochPlan& epoch,
                                  const std::vector<int64_t>& order,
                                  const std::vector<int64_t>& lengths, int64_t budget,
                                  int64_t rank);

}  // namespace bigbatch
