#pragma once
// The one place where ranks meet during training (Flashlight's Reducer). The engine calls
// reduce() exactly once per update, after the window's last micro-step, with the *summed*
// local gradients and the window's local totals; afterwards the gradients hold the global
// sum and the totals are global. The single-process reducer does nothing, so no training code
// branches on world_size == 1. collective_reducer.h is the multi-process one (c10d).
//
//   LocalReducer reducer;
//   reducer.attach(parameters);                       // once: may lay gradients out in buckets
//   WindowTotals global = reducer.reduce(gradients, local);
#include <cstdint>
#include <functional>
#include <vector>

#include "state/counts.h"

namespace at {
class Tensor;
}

namespace bigbatch {

// What a window saw, summed over its micro-steps (and, after reduce(), over ranks): its counts,
// and what travels with them in the same collective.
struct WindowTotals {
  Counts counts;    // samples, items (the divisor of the mean gradient), loss sum, metric sums
  double stop = 0;  // ranks asking to stop after this update (SIGINT/SIGTERM)
  // The gradient noise scale's small batch (stats/gradient_noise.h), per rank that measured
  // one: 1, its mean gradient's squared norm, and 1 / its items. Summed over ranks, they give
  // the mean squared norm of all ranks' small batches and their harmonic-mean size: an estimate
  // with the variance of one rank's divided by the ranks, and the same on every rank.
  double small_batches = 0;
  double small_sq_norm = 0;
  double small_inverse_items = 0;
  // Not summed: when positive, this rank's small batch is its whole window, whose own gradient
  // only the reducer sees (before the all-reduce adds the other ranks'): it measures that
  // gradient's squared norm, multiplies it by this factor (the mean's scale) and adds it to
  // small_sq_norm. A single process ignores it: its window is the big batch.
  double pre_reduction_norm_scale = 0;
  // Set: that norm is of the gradients times these, asked for by parameter (its index in
  // attach()'s order) in reduction_buckets()' order: the optimizer's preconditioner
  // (train/accumulation_engine.h, precondition_noise), which a sharded optimizer streams from
  // each parameter's owner (optim/optimizer_shards.h).
  std::function<at::Tensor(size_t parameter)> pre_reduction_norm_weight;
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // Called once with the trainable parameters, before the first micro-step.
  virtual void attach(const std::vector<at::Tensor>& /*parameters*/) {}
  // Called before the backward pass of a window's last micro-step, with the window's totals:
  // a reducer may then start all-reducing buckets as their gradients become final, overlapping
  // communication with the rest of that backward pass. reduce() completes the window either way.
  virtual void begin_last_backward(const WindowTotals& /*local*/) {}
  virtual WindowTotals reduce(std::vector<at::Tensor>& gradients, const WindowTotals& local) = 0;
  // Makes every rank hold rank 0's values (initial weights and buffers).
  virtual void broadcast_from_first_rank(std::vector<at::Tensor>& /*tensors*/) {}
  // Replaces `tensor` by its sum over the ranks (set-up checks; not counted in calls()).
  virtual void sum_over_ranks(at::Tensor& /*tensor*/) {}
  // Makes every rank hold rank `root`'s values (--shard-optimizer: each owner's new parameters).
  virtual void broadcast_from(std::vector<at::Tensor>& /*tensors*/, int64_t /*root*/) {}
  // The same on a second channel whose calls are ordered among themselves only, not with the
  // gradients' all-reduces: ranks may call it at different points of a window (inside the
  // last backward pass on one rank, after the first micro-step on another), as long as each
  // makes the same calls in the same order. open_side_channel() (every rank, at set-up) first.
  virtual void open_side_channel() {}
  virtual void broadcast_aside(std::vector<at::Tensor>& /*tensors*/, int64_t /*root*/) {}
  // The parameters (indices in attach()'s order) in the order reduce() reads their gradients,
  // bucket by bucket.
  virtual std::vector<std::vector<size_t>> reduction_buckets() const { return {}; }
  // True when the reducer owns the gradients' memory (they are views into its buckets): the
  // engine then zeroes them between windows instead of releasing them.
  virtual bool keeps_gradient_storage() const { return false; }
  virtual int64_t world_size() const = 0;
  virtual int64_t rank() const = 0;
  // Collective calls issued so far; metrics report the count per update.
  virtual int64_t calls() const = 0;
};

class LocalReducer final : public GradientReducer {
 public:
  WindowTotals reduce(std::vector<at::Tensor>& /*gradients*/, const WindowTotals& local) override {
    return local;
  }
  int64_t world_size() const override { return 1; }
  int64_t rank() const override { return 0; }
  int64_t calls() const override { return 0; }
};

}  // namespace bigbatch
