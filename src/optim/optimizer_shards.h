#pragma once
// --shard-optimizer (ZeRO stage 1, PyTorch's ZeroRedundancyOptimizer's layout): each parameter's
// optimizer state lives on one rank (dist/parameter_owners.h), which steps it with the same
// per-tensor optimizer an unsharded run uses; each owner's new values are then broadcast, so
// every rank holds the same weights — bit for bit those of the unsharded run, since copies are
// exact. The gradients are still all-reduced whole, once per update: every rank holds the exact
// mean gradient, so clipping and the raw noise scale are untouched. What needs the whole state:
//
//  - the preconditioned noise scale (AdamW, LAMB): the update's gradient times the
//    preconditioner, as per-tensor norms computed by the owners and summed over the ranks (one
//    non-zero addend each, so exact); a rank's own gradients (its first micro-step's, or its
//    window's before the all-reduce) times the preconditioner, streamed from the owners one
//    bucket at a time on the reducer's side channel (GradientReducer::broadcast_aside), in the
//    order the reducer reads them, so a rank holds at most one bucket of it;
//  - checkpoints, whose format does not depend on the sharding: the owners' shares gathered to
//    rank 0 into the unsharded layout (make_whole_optimizer + gather_whole), and a checkpoint
//    loaded whole and cut to this rank's share (adopt_whole).
//
//   OptimizerShards shards(model->parameters(), settings, reducer, bucket_bytes);
//   auto optimizer = shards.make_owned_optimizer();     // steps this rank's parameters only
//   optimizer->step();  shards.share_updated_parameters();
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/gradient_reducer.h"
#include "dist/parameter_owners.h"
#include "optim/optimizer.h"

namespace bigbatch {

class OptimizerShards {
 public:
  // Every rank, at set-up, with the same parameters (the model's, in its order; those that
  // require a gradient are owned, as the engine's): opens the reducer's side channel.
  // `bucket_bytes`: the most one broadcast of new values carries.
  OptimizerShards(std::vector<torch::Tensor> parameters, OptimizerSettings settings,
                  GradientReducer& reducer, int64_t bucket_bytes);

  const ParameterOwners& owners() const { return owners_; }
  int64_t world_size() const { return int64_t(owners_.values_per_rank.size()); }
  // This rank's optimizer, over the parameters it owns (possibly none); remembered here.
  std::unique_ptr<torch::optim::Optimizer> make_owned_optimizer();
  // The unsharded optimizer over every parameter, without state: what a checkpoint is read
  // into (then adopt_whole) or gathered into (gather_whole).
  std::unique_ptr<torch::optim::Optimizer> make_whole_optimizer() const;

  // After the owned optimizer's step: every rank receives each owner's new values, in buckets
  // of one owner's parameters.
  void share_updated_parameters();

  // The preconditioner stream of one window (every rank consumes it whole, in order, once per
  // window; it opens with the moments' step count, so every rank knows whether the
  // preconditioner has settled (kPreconditionerSettleSteps) before asking for it).
  bool preconditioner_settled();
  // The preconditioner of parameter `parameter` (an index into the trainable ones), which must be
  // the next in the reducer's order.
  torch::Tensor next_preconditioner(size_t parameter);
  // Consumes what this rank did not ask for; afterwards preconditioner_settled() still answers.
  void finish_preconditioner_stream();
  // Ready for the next window.
  void reset_preconditioner_stream();

  // The norm of gradients[i] times the preconditioner, per parameter, on every rank (float32,
  // in parameter order): each owner's own, summed over the ranks. Only once settled.
  torch::Tensor preconditioned_norms(const std::vector<torch::Tensor>& gradients);
  // The same of this rank's own gradients (its first micro-step's), the preconditioner streamed
  // from the owners (the whole window's stream): the defined gradients' norms in parameter
  // order, stacked; undefined when none is. Only once settled.
  torch::Tensor streamed_preconditioned_norms(const std::vector<torch::Tensor>& gradients);

  // Every rank: rank 0 gets the owners' states in `whole` (make_whole_optimizer's); the other
  // ranks send theirs and leave `whole` untouched (they may pass nullptr).
  void gather_whole(torch::optim::Optimizer* whole);
  // This rank's share of a whole state (a checkpoint read into make_whole_optimizer's).
  void adopt_whole(torch::optim::Optimizer& whole);

 private:
  bool owns(size_t parameter) const { return owners_.owner[parameter] == reducer_.rank(); }
  std::vector<torch::Tensor> parameters_of(int64_t rank) const;

  std::vector<torch::Tensor> all_parameters_;  // the unsharded optimizer's (checkpoints' layout)
  std::vector<torch::Tensor> parameters_;      // those owned: the trainable ones, as the engine's
  OptimizerSettings settings_;
  GradientReducer& reducer_;
  int64_t bucket_bytes_;
  ParameterOwners owners_;
  torch::optim::Optimizer* owned_ = nullptr;  // make_owned_optimizer()'s
  // Takes the preconditioner of the next of the reducer's buckets: one broadcast per owner of
  // its parameters, each owner's tensors flat in one.
  void receive_next_bucket();

  // The reducer's buckets (from the first use: known once the engine attached the parameters),
  // which the stream follows: at most one bucket's preconditioner is held at a time.
  std::vector<std::vector<size_t>> stream_buckets_;
  size_t buckets_streamed_ = 0;
  std::vector<torch::Tensor> bucket_weights_;  // the current bucket's, in its order
  size_t bucket_position_ = 0;                 // of the next parameter asked for in it
  int64_t stream_steps_ = -1;                  // the stream's header; -1: not read yet
};

}  // namespace bigbatch
