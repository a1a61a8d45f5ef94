#pragma once
// Which rank keeps (and steps) each parameter's optimizer state under --shard-optimizer: whole
// parameters, as PyTorch's ZeroRedundancyOptimizer lays them out, so the owner runs the very
// per-tensor optimizer code an unsharded run runs and the result is bit for bit the same.
// Balanced by size: the largest parameters first, each to the rank holding the fewest values so
// far (ties: the lower rank; equal sizes: the earlier parameter first), which every rank
// computes alike from the model's shapes alone. Torch-free, for tests.
//
//   ParameterOwners owners = assign_parameter_owners({100, 10, 60}, /*ranks=*/2);
//   // owners.owner == {0, 1, 1}; owners.values_per_rank == {100, 70}
#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct ParameterOwners {
  std::vector<int64_t> owner;            // per parameter, in the model's order
  std::vector<int64_t> values_per_rank;  // elements owned, per rank
  std::vector<int64_t> tensors_per_rank;

  // "rank 0: 3 tensors, 101770 values (50.1%); rank 1: ..."
  std::string describe() const;
  // The largest share over the even share (1.0: perfectly balanced).
  double imbalance() const;
};

// `sizes`: each parameter's element count, in the model's order; `ranks` >= 1.
ParameterOwners assign_parameter_owners(const std::vector<int64_t>& sizes, int64_t ranks);

}  // namespace bigbatch
