#include "dist/parameter_owners.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

ParameterOwners assign_parameter_owners(const std::vector<int64_t>& sizes, int64_t ranks) {
  BB_INTERNAL_ASSERT(ranks >= 1, "parameters need at least one rank to own them");
  ParameterOwners owners;
  owners.owner.assign(sizes.size(), 0);
  owners.values_per_rank.assign(size_t(ranks), 0);
  owners.tensors_per_rank.assign(size_t(ranks), 0);
  std::vector<size_t> largest_first(sizes.size());
  std::iota(largest_first.begin(), largest_first.end(), size_t{0});
  std::stable_sort(largest_first.begin(), largest_first.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  for (const size_t parameter : largest_first) {
    // min_element returns the first of equal loads: the lower rank.
    const auto lightest =
        std::min_element(owners.values_per_rank.begin(), owners.values_per_rank.end());
    const auto rank = std::distance(owners.values_per_rank.begin(), lightest);
    owners.owner[parameter] = rank;
    *lightest += sizes[parameter];
    ++owners.tensors_per_rank[size_t(rank)];
  }
  return owners;
}

double ParameterOwners::imbalance() const {
  const int64_t total = std::accumulate(values_per_rank.begin(), values_per_rank.end(), int64_t{0});
  if (total == 0 || values_per_rank.empty())
    return 1.0;
  const int64_t largest = *std::max_element(values_per_rank.begin(), values_per_rank.end());
  return double(largest) * double(values_per_rank.size()) / double(total);
}

std::string ParameterOwners::describe() const {
  const int64_t total = std::accumulate(values_per_rank.begin(), values_per_rank.end(), int64_t{0});
  std::string text;
  for (size_t rank = 0; rank < values_per_rank.size(); ++rank) {
    const double share = total > 0 ? 100.0 * double(values_per_rank[rank]) / double(total) : 0.0;
    text += (rank ? "; rank " : "rank ") + std::to_string(rank) + ": " +
            count_of(tensors_per_rank[rank], "tensor") + ", " +
            std::to_string(values_per_rank[rank]) + " values (" + format_fixed(share, 1) + "%)";
  }
  return text;
}

}  // namespace bigbatch
