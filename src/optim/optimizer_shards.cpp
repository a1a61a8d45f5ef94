#include "optim/optimizer_shards.h"

#include <cstring>
#include <functional>
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

std::vector<torch::Tensor> trainable(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> kept;
  for (const auto& p : parameters) {
    if (p.requires_grad())
      kept.push_back(p);
  }
  return kept;
}

using Broadcast = std::function<void(std::vector<torch::Tensor>&, int64_t root)>;

// One broadcast of `values` from `owner`, flat: the owner passes its tensors, the other ranks
// tensors of the same shapes and options (only those are read). Returns the flat buffer, which
// then holds the owner's values in order on every rank.
torch::Tensor broadcast_flat(const std::vector<torch::Tensor>& values, int64_t owner, int64_t rank,
                             const Broadcast& broadcast) {
  torch::Tensor flat;
  if (owner == rank) {
    std::vector<torch::Tensor> pieces;
    for (const auto& v : values)
      pieces.push_back(v.reshape({-1}));
    flat = torch::cat(pieces);
  } else {
    int64_t numel = 0;
    for (const auto& v : values)
      numel += v.numel();
    flat = torch::empty({numel}, values.front().options());
  }
  std::vector<torch::Tensor> one{flat};
  broadcast(one, owner);
  return flat;
}

// broadcast_flat's buffer as tensors shaped like `like` (views).
std::vector<torch::Tensor> split_flat(const torch::Tensor& flat,
                                      const std::vector<torch::Tensor>& like) {
  std::vector<torch::Tensor> parts;
  int64_t offset = 0;
  for (const auto& t : like) {
    parts.push_back(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
  return parts;
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
  const Broadcast broadcast = [this](std::vector<torch::Tensor>& tensors, int64_t root) {
    reducer_.broadcast_from(tensors, root);
  };
  std::vector<torch::Tensor> bucket;
  int64_t bucket_bytes = 0;
  const auto send = [&](int64_t owner) {
    if (bucket.size() == 1 && bucket.front().is_contiguous()) {
      // A tensor alone (one at least the bucket's size): sent and received in place, no copy.
      broadcast(bucket, owner);
    } else if (!bucket.empty()) {
      const torch::Tensor flat = broadcast_flat(bucket, owner, reducer_.rank(), broadcast);
      if (owner != reducer_.rank()) {
        const std::vector<torch::Tensor> values = split_flat(flat, bucket);
        for (size_t i = 0; i < bucket.size(); ++i)
          bucket[i].copy_(values[i]);
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
                              !p.options().type_equal(bucket.front().options())))
        send(owner);
      bucket.push_back(p);
      bucket_bytes += bytes;
    }
    send(owner);
  }
}

bool OptimizerShards::preconditioner_settled() {
  if (stream_buckets_.empty()) {
    // Known once the engine attached the parameters to the reducer.
    stream_buckets_ = reducer_.reduction_buckets();
    size_t parameters = 0;
    for (const auto& bucket : stream_buckets_)
      parameters += bucket.size();
    BB_INTERNAL_ASSERT(parameters == parameters_.size() && !stream_buckets_.front().empty(),
                       "the reducer reads other parameters than the optimizer steps");
  }
  if (stream_steps_ < 0) {
    const size_t first = stream_buckets_.front().front();
    torch::Tensor steps = torch::zeros({1}, torch::kInt64);
    if (owns(first))
      steps[0] = adam_steps_of(*owned_, parameters_[first]);
    std::vector<torch::Tensor> one{steps};
    reducer_.broadcast_aside(one, owners_.owner[first]);
    stream_steps_ = steps.item<int64_t>();
  }
  return stream_steps_ >= kPreconditionerSettleSteps;
}

void OptimizerShards::receive_next_bucket() {
  BB_INTERNAL_ASSERT(buckets_streamed_ < stream_buckets_.size(),
                     "more of the preconditioner asked for than there is");
  const std::vector<size_t>& bucket = stream_buckets_[buckets_streamed_++];
  torch::NoGradGuard no_grad;
  const Broadcast broadcast = [this](std::vector<torch::Tensor>& tensors, int64_t root) {
    reducer_.broadcast_aside(tensors, root);
  };
  bucket_weights_.assign(bucket.size(), torch::Tensor());
  bucket_position_ = 0;
  for (int64_t owner = 0; owner < world_size(); ++owner) {
    std::vector<size_t> positions;  // of the owner's parameters in the bucket
    std::vector<torch::Tensor> like, values;
    for (size_t k = 0; k < bucket.size(); ++k) {
      if (owners_.owner[bucket[k]] != owner)
        continue;
      const torch::Tensor& p = parameters_[bucket[k]];
      positions.push_back(k);
      like.push_back(p);
      if (owner == reducer_.rank()) {
        values.push_back(adam_preconditioner_of(*owned_, p));
        BB_INTERNAL_ASSERT(values.back().defined(),
                           "an owner without the preconditioner its step count says");
      }
    }
    if (positions.empty())
      continue;
    const torch::Tensor flat =
        broadcast_flat(owner == reducer_.rank() ? values : like, owner, reducer_.rank(), broadcast);
    const std::vector<torch::Tensor> weights = split_flat(flat, like);
    for (size_t j = 0; j < positions.size(); ++j)
      bucket_weights_[positions[j]] = weights[j];
  }
}

torch::Tensor OptimizerShards::next_preconditioner(size_t parameter) {
  BB_INTERNAL_ASSERT(preconditioner_settled(), "the preconditioner asked for before it settled");
  if (bucket_position_ == bucket_weights_.size())
    receive_next_bucket();
  BB_INTERNAL_ASSERT(stream_buckets_[buckets_streamed_ - 1][bucket_position_] == parameter,
                     "the preconditioner asked for out of the reducer's order");
  return bucket_weights_[bucket_position_++];
}

torch::Tensor OptimizerShards::streamed_preconditioned_norms(
    const std::vector<torch::Tensor>& gradients) {
  BB_INTERNAL_ASSERT(gradients.size() == parameters_.size(), "gradients of other parameters");
  torch::NoGradGuard no_grad;
  preconditioner_settled();  // knows the reducer's buckets from here
  std::vector<torch::Tensor> norms(gradients.size());
  for (const auto& bucket : stream_buckets_) {
    for (const size_t i : bucket) {
      const torch::Tensor weight = next_preconditioner(i);
      if (gradients[i].defined())
        norms[i] = at::_foreach_norm({gradients[i] * weight}).front();
    }
  }
  std::vector<torch::Tensor> defined;
  for (const auto& norm : norms) {
    if (norm.defined())
      defined.push_back(norm);
  }
  return defined.empty() ? torch::Tensor() : torch::stack(defined);
}

void OptimizerShards::finish_preconditioner_stream() {
  if (!preconditioner_settled())
    return;
  while (buckets_streamed_ < stream_buckets_.size())
    receive_next_bucket();
  bucket_weights_.clear();
  bucket_position_ = 0;
}

void OptimizerShards::reset_preconditioner_stream() {
  buckets_streamed_ = 0;
  bucket_weights_.clear();
  bucket_position_ = 0;
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
