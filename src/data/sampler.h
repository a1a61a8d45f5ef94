#pragma once
// The order-invariant sampler (docs/design.md, invariant 1). An epoch's sample order is a
// permutation that depends only on (seed, epoch), never on how the global batch is split:
// update u takes positions [u x G, (u + 1) x G) of it, ranks take slices of that, and
// micro-batches slice further (batching/batch_plan.h). So any micro x accumulation x world
// factorisation of one global batch trains on exactly the same samples in every update.
//
// The permutation is our own (SplitMix64 + Fisher-Yates), not torch::randperm, so it is the
// same across libtorch versions and devices and can be reproduced in a few lines of Python
// (tests/python/bigbatch_oracle.py does).
//
//   std::vector<int64_t> order = epoch_order(/*seed=*/42, /*epoch=*/3, dataset_size, Shuffle::On);
#include <cstdint>
#include <vector>

namespace bigbatch {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and statistically sound for shuffling.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, bound) without modulo bias (rejection sampling).
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

enum class Shuffle { Off, On };

// Position -> dataset index for one epoch. Shuffle::Off returns 0, 1, ..., n - 1.
std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, int64_t dataset_size,
                                 Shuffle shuffle);

}  // namespace bigbatch
