#include "data/sampler.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace bigbatch {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound) {
  // Accept only draws under the largest multiple of `bound`, so every residue is equally likely.
  const uint64_t limit = (~uint64_t{0} / bound) * bound;
  uint64_t draw = next();
  while (draw >= limit)
    draw = next();
  return draw % bound;
}

std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, int64_t dataset_size,
                                 Shuffle shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle == Shuffle::Off)
    return order;
  // Mixing the epoch through the golden-ratio constant decorrelates (seed, epoch) pairs such
  // as (1, 2) and (2, 1).
  SplitMix64 rng(seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(epoch + 1)));
  for (int64_t i = dataset_size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace bigbatch
