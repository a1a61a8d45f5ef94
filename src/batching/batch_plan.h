#pragma once
// The batch plan: how one optimizer update is assembled.
//
//   global_batch_size = micro_batch_size x accumulation_steps x world_size
//
// The user states any two of global / micro / accumulation; the plan derives the third and
// says which one it derived. Given a global batch and a micro-batch that does not divide the
// per-rank batch, each window ends with one smaller micro-batch (1000 = 64 x 15 + 40): the
// engine weights every sample equally, so this changes no mathematics. Sizes that do not fit
// together are a bigbatch::Error naming the values and the nearest valid choices: nothing is ever
// rounded silently.
//
//   BatchRequest request;
//   request.global_batch_size = 1024;
//   request.micro_batch_size = 64;
//   BatchPlan plan = BatchPlan::resolve(request);   // accumulation_steps == 16
//   EpochPlan epoch = plan_epoch(plan, 60000, LastWindow::Keep);
//   UpdateWindow w = window_for_update(plan, epoch, /*update_in_epoch=*/58, /*rank=*/0);
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/name_table.h"

namespace bigbatch {

inline constexpr int64_t kDefaultGlobalBatchSize = 256;
inline constexpr int64_t kDefaultMicroBatchSize = 32;

// What to do with the samples left over when the dataset size is not a multiple of the
// global batch: Keep trains one short final update on them (its gradient is the exact mean
// over the samples it really saw); Drop skips them.
enum class LastWindow { Keep, Drop };
const NameTable<LastWindow>& last_window_names();
inline const char* to_string(LastWindow policy) {
  return last_window_names().name(policy);
}

struct BatchRequest {
  std::optional<int64_t> global_batch_size;
  std::optional<int64_t> micro_batch_size;
  std::optional<int64_t> accumulation_steps;
  int64_t world_size = 1;
};

struct BatchPlan {
  int64_t micro_batch_size = kDefaultMicroBatchSize;
  int64_t accumulation_steps = 1;
  int64_t world_size = 1;
  int64_t global_batch_size = kDefaultMicroBatchSize;
  // Which size the plan derived rather than read: "global_batch_size", "micro_batch_size" or
  // "accumulation_steps".
  std::string derived;

  // Samples per rank in a full window: micro x accumulation, or less when the window's last
  // micro-batch is smaller (a micro-batch need not divide the per-rank batch).
  int64_t per_rank_batch_size() const;
  int64_t last_micro_batch_size() const;
  bool has_uneven_micro_batches() const { return last_micro_batch_size() != micro_batch_size; }
  // "256 = micro 32 x accumulation 8 x world 1", plus the last micro-batch when it is smaller.
  std::string describe() const;

  // The same global batch and world cut into micro-batches of `micro`, accumulation re-derived:
  // what the out-of-memory back-off switches to.
  BatchPlan with_micro_batch(int64_t micro) const;

  // Fills in what the request leaves open: with fewer than two sizes given, the global batch
  // defaults to kDefaultGlobalBatchSize and then the micro batch to kDefaultMicroBatchSize.
  static BatchPlan resolve(const BatchRequest& request);
};

// Epoch arithmetic for one dataset size. Micro-steps are counted on rank 0, which holds the
// largest share of a short window.
struct EpochPlan {
  int64_t dataset_size = 0;
  LastWindow last_window = LastWindow::Keep;
  int64_t full_updates = 0;      // updates of exactly global_batch_size samples
  int64_t last_window_size = 0;  // samples in the short final update (0: none or dropped)
  int64_t dropped_samples = 0;   // samples not used in the epoch (LastWindow::Drop)
  int64_t updates_per_epoch = 0;
  int64_t micro_steps_per_epoch = 0;  // forward/backward passes per epoch on one rank
  int64_t samples_per_epoch = 0;      // samples that contribute to an update
  // Token rows: the mean target tokens per training sample, which converts intervals in tokens
  // ("4Mt") to samples; 0 where the items are the samples (images).
  double items_per_sample = 0;
  std::vector<std::string> warnings;  // legal but worth saying (e.g. a batch larger than the data)
};

EpochPlan plan_epoch(const BatchPlan& plan, int64_t dataset_size, LastWindow last_window,
                     double items_per_sample = 0);

// The samples of one update, as positions in the epoch's order (see data/sampler.h).
// The update covers [begin, begin + size); this rank takes [rank_begin, rank_begin + rank_size)
// and feeds it as micro-batches of the listed sizes (the last one may be smaller).
struct UpdateWindow {
  int64_t begin = 0;
  int64_t size = 0;
  int64_t rank_begin = 0;
  int64_t rank_size = 0;
  std::vector<int64_t> micro_batch_sizes;
};

UpdateWindow window_for_update(const BatchPlan& plan, const EpochPlan& epoch,
                               int64_t update_in_epoch, int64_t rank);

// The window that starts at position `begin` of an epoch's order of `dataset_size` samples: a
// whole global batch, or under LastWindow::Keep the rest of the epoch; empty (size 0) when the
// epoch is used up, or under Drop when the rest is smaller than the global batch. What a batch
// that changes inside an epoch (schedule/batch_schedule.h) cuts windows with;
// window_for_update(plan, epoch, u, rank) == window_at(plan, size, policy, u x global, rank).
UpdateWindow window_at(const BatchPlan& plan, int64_t dataset_size, LastWindow last_window,
                       int64_t begin, int64_t rank);

}  // namespace bigbatch
