#include "optim/optimizer_shards.h"

#include <cstring>
#include <utility>

#include "core/error.h"

namespace bigbatch {

namespace {

std::vector<int64_t> sizes_of(const std::vector<torch::Tensor>& parameters) {
  std::vector<int64_t> sizes;
  sizes.reserve(parameters.size());
  for (const auto& p : parameters)
    sizes.push_back(p.numel());
  return sizes;
}

// Moves the state of `parameters` from one optimizer to another over the same tensors (their
// state keys are the tensors' own, so equal in both).
void move_states(torch::optim::Optimizer& from, torch::optim::Optimizer& to,
                 const std::vector<torch::Tensor>& parameters) {
  for (const auto& p : parameters) {
    const auto key = optimizer_state_key(p);
    const auto slot = from.state().find(key);
    if (slot != from.state().end() && slot->second)
      to.state()[key] = std::move(slot->second);
  }
}

// make_optimizer's optimizers have one group: its options carry the rate and the betas.
void copy_group_options(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  to.param_groups().front().set_options(from.param_groups().front().options().clone());
}

}  // namespace

namespace {
std::vector<torch::Tensor> trainable(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> kept;
  for (const auto& p : parameters) {
    if (p.requires_grad())
      kept.push_back(p);
  }
  return kept;
}
}  // namespace

OptimizerShards::OptimizerShards(std::vector<torch::Tensor> parameters, OptimizerSettings settings,
                                 GradientReducer& reducer, int64_t bucket_bytes)
    : all_parameters_(std::move(parameters)),
      parameters_(trainable(all_parameters_)),
      settings_(settings),
      reducer_(reducer),
      bucket_bytes_(bucket_bytes),
      owners_(assign_parameter_owners(sizes_of(parameters_), reducer.world_size())) {
  BB_INTERNAL_ASSERT(!parameters_.empty(), "an optimizer shards parameters: there are none");
  reducer_.open_side_channel();
}

std::vector<torch::Tensor> OptimizerShards::parameters_of(int64_t rank) const {
  std::vector<torch::Tensor> owned;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (owners_.owner[i] == rank)
      owned.push_back(parameters_[i]);
  }
  return owned;
}

std::unique_ptr<torch::optim::Optimizer> OptimizerShards::make_owned_optimizer() {
  auto optimizer = make_optimizer(settings_, parameters_of(reducer_.rank()));
  owned_ = optimizer.get();
  return optimizer;
}

std::unique_ptr<torch::optim::Optimizer> OptimizerShards::make_whole_optimizer() const {
  return make_optimizer(settings_, all_parameters_);
}

void OptimizerShards::share_updated_parameters() {
  torch::NoGradGuard no_grad;
  std::vector<size_t> bucket;
  int64_t bucket_bytes = 0;
  const auto send = [&](int64_t owner) {
    if (bucket.empty())
      return;
    const torch::Tensor& first = parameters_[bucket.front()];
    if (bucket.size() == 1 && first.is_contiguous()) {
      // A tensor alone (one at least the bucket's size): sent and received in place, no copy.
      std::vector<torch::Tensor> one{first};
      reducer_.broadcast_from(one, owner);
      bucket.clear();
      bucket_bytes = 0;
      return;
    }
    torch::Tensor flat;
    if (owner == reducer_.rank()) {
      std::vector<torch::Tensor> pieces;
      for (const size_t i : bucket)
        pieces.push_back(parameters_[i].reshape({-1}));
      flat = torch::cat(pieces);
    } else {
      int64_t numel = 0;
      for (const size_t i : bucket)
        numel += parameters_[i].numel();
      flat = torch::empty({numel}, first.options());
    }
    std::vector<torch::Tensor> one{flat};
    reducer_.broadcast_from(one, owner);
    if (owner != reducer_.rank()) {
      int64_t offset = 0;
      for (const size_t i : bucket) {
        torch::Tensor& p = parameters_[i];
        p.copy_(flat.narrow(0, offset, p.numel()).view_as(p));
        offset += p.numel();
      }
    }
    bucket.clear();
    bucket_bytes = 0;
  };
  for (int64_t owner = 0; owner < world_size(); ++owner) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (owners_.owner[i] != owner)
        continue;
      const torch::Tensor& p = parameters_[i];
      const int64_t bytes = static_cast<int64_t>(p.nbytes());
      // One dtype and device per broadcast; at most bucket_bytes_ unless one tensor is larger.
      if (!bucket.empty() && (bucket_bytes + bytes > bucket_bytes_ ||
                              !p.options().type_equal(parameters_[bucket.front()].options())))
        send(owner);
      bucket.push_back(i);
      bucket_bytes += bytes;
    }
    send(owner);
  }
}

bool OptimizerShards::preconditioner_settled() {
  if (stream_order_.empty()) {
    // Known once the engine attached the parameters to the reducer.
    stream_order_ = reducer_.reduction_order();
    BB_INTERNAL_ASSERT(stream_order_.size() == parameters_.size(),
                       "the reducer reads other parameters than the optimizer steps");
  }
  if (stream_steps_ < 0) {
    const size_t first = stream_order_.front();
    torch::Tensor steps = torch::zeros({1}, torch::kInt64);
    if (owns(first))
      steps[0] = adam_steps_of(*owned_, parameters_[first]);
    std::vector<torch::Tensor> one{steps};
    reducer_.broadcast_aside(one, owners_.owner[first]);
    stream_steps_ = steps.item<int64_t>();
  }
  return stream_steps_ >= kPreconditionerSettleSteps;
}

torch::Tensor OptimizerShards::next_preconditioner(size_t parameter) {
  BB_INTERNAL_ASSERT(preconditioner_settled(), "the preconditioner asked for before it settled");
  BB_INTERNAL_ASSERT(streamed_ < stream_order_.size() && stream_order_[streamed_] == parameter,
                     "the preconditioner asked for out of the reducer's order");
  ++streamed_;
  torch::NoGradGuard no_grad;
  const torch::Tensor& p = parameters_[parameter];
  torch::Tensor weight =
      owns(parameter) ? adam_preconditioner_of(*owned_, p) : torch::empty_like(p);
  BB_INTERNAL_ASSERT(weight.defined(), "an owner without the preconditioner its step count says");
  std::vector<torch::Tensor> one{weight};
  reducer_.broadcast_aside(one, owners_.owner[parameter]);
  return weight;
}

void OptimizerShards::finish_preconditioner_stream() {
  if (!preconditioner_settled())
    return;
  while (streamed_ < stream_order_.size())
    next_preconditioner(stream_order_[streamed_]);
}

void OptimizerShards::reset_preconditioner_stream() {
  streamed_ = 0;
  stream_steps_ = -1;
}

torch::Tensor OptimizerShards::preconditioned_norms(const std::vector<torch::Tensor>& gradients) {
  BB_INTERNAL_ASSERT(gradients.size() == parameters_.size(), "gradients of other parameters");
  torch::NoGradGuard no_grad;
  torch::Tensor norms = torch::zeros({int64_t(parameters_.size())}, gradients.front().options());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!owns(i))
      continue;
    const torch::Tensor weight = adam_preconditioner_of(*owned_, parameters_[i]);
    BB_INTERNAL_ASSERT(weight.defined(), "preconditioned norms before the preconditioner settled");
    // The same kernel as the unsharded run's one call over all parameters (one norm each).
    norms[int64_t(i)].copy_(at::_foreach_norm({gradients[i] * weight}).front());
  }
  reducer_.sum_over_ranks(norms);
  return norms;
}

void OptimizerShards::gather_whole(torch::optim::Optimizer* whole) {
  BB_INTERNAL_ASSERT(owned_, "gather_whole() before make_owned_optimizer()");
  const int64_t rank = reducer_.rank();
  BB_INTERNAL_ASSERT(rank != 0 || whole, "rank 0 gathers into a whole optimizer");
  const std::string mine = optimizer_state_bytes(*owned_);
  torch::Tensor sizes = torch::zeros({world_size()}, torch::kInt64);
  sizes[rank] = static_cast<int64_t>(mine.size());
  reducer_.sum_over_ranks(sizes);
  const torch::Device device = parameters_.front().device();
  for (int64_t owner = 0; owner < world_size(); ++owner) {
    std::string bytes;
    if (owner == 0) {
      bytes = rank == 0 ? mine : std::string();
    } else {
      const int64_t size = sizes[owner].item<int64_t>();
      torch::Tensor wire = torch::empty({size}, torch::kUInt8);
      if (rank == owner)
        std::memcpy(wire.data_ptr(), mine.data(), mine.size());
      std::vector<torch::Tensor> one{wire};
      reducer_.broadcast_from(one, owner);
      if (rank == 0)
        bytes.assign(static_cast<const char*>(wire.data_ptr()), size_t(size));
    }
    if (rank != 0)
      continue;
    const std::vector<torch::Tensor> owned = parameters_of(owner);
    auto share = make_optimizer(settings_, owned);
    load_optimizer_state_bytes(*share, bytes, device);
    move_states(*share, *whole, owned);
  }
  if (rank == 0)
    copy_group_options(*owned_, *whole);
}

void OptimizerShards::adopt_whole(torch::optim::Optimizer& whole) {
  BB_INTERNAL_ASSERT(owned_, "adopt_whole() before make_owned_optimizer()");
  move_states(whole, *owned_, parameters_of(reducer_.rank()));
  copy_group_options(whole, *owned_);
}

}  // namespace bigbatch
