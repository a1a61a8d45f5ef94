#include "train/accumulation_engine.h"

#include <cmath>
#include <utility>

#include "core/error.h"
#include "models/accumulating_linear.h"
#include "optim/optimizer.h"
#include "optim/optimizer_shards.h"

namespace bigbatch {

AccumulationEngine::AccumulationEngine(torch::nn::Sequential model,
                                       torch::optim::Optimizer& optimizer, GradientReducer& reducer,
                                       EngineOptions options)
    : model_(std::move(model)),
      optimizer_(optimizer),
      reducer_(reducer),
      options_(options),
      task_(options.task.value_or(Task::of(*model_, /*regression=*/false))),
      feed_(model_device(*model_)) {
  for (const auto& p : model_->parameters()) {
    if (p.requires_grad())
      parameters_.push_back(p);
  }
  reducer_.attach(parameters_);
  // A window of one micro-step has no smaller batch inside it on this rank; with ranks, the
  // rank's own gradient before the all-reduce is one.
  local_norm_available_ = options_.measure_noise && reducer_.world_size() > 1;
  set_gradient_accumulation_fusion(
      *model_, options_.fuse_gradient_accumulation && options_.precision == Precision::Fp32);
}

void AccumulationEngine::micro_step(const torch::Tensor& inputs, const torch::Tensor& targets,
                                    MicroStep kind) {
  micro_step(Batch{inputs, targets, Task::items_of(targets)}, kind);
}

void AccumulationEngine::micro_step(const Batch& host_batch, MicroStep kind) {
  const Batch batch = feed_.put(host_batch);
  const TaskLoss task_loss = task_.loss(model_, batch, options_.precision, &tally_);
  backward_micro_batch(task_loss.loss_sum, batch.size(), task_loss.items, kind);
  // The assembler refills this batch's host buffer for the micro-step after next.
  feed_.release_host();
}

void AccumulationEngine::backward_loss(const torch::Tensor& loss_sum, int64_t samples,
                                       int64_t items, MicroStep kind) {
  tally_.add_loss(loss_sum.detach());
  backward_micro_batch(loss_sum, samples, items, kind);
}

void AccumulationEngine::backward_micro_batch(const torch::Tensor& loss, int64_t samples,
                                              int64_t items, MicroStep kind) {
  samples_ += samples;
  items_ += items;
  ++micro_steps_;
  // The optimizer's state does not change inside a window: its preconditioner is read once.
  if (options_.measure_noise && options_.precondition_noise && !options_.shards &&
      micro_steps_ == 1)
    noise_weights_ = adam_preconditioner(optimizer_, parameters_);
  if (kind == MicroStep::Last)
    reducer_.begin_last_backward(local_totals());
  if (options_.per_micro_batch_mean_for_tests) {
    backward_through(*model_, loss * (1.0 / double(items)));
  } else if (expected_items_ > 0) {
    // The window's size is known: seeding backward with 1 / count instead of 1 makes it
    // produce the mean gradient directly, which saves a pass over every gradient at the end.
    // The seed is the value `loss * (1 / count)` would pass back, without that multiplication
    // and its backward node in every micro-step.
    if (!backward_seed_.defined() || seed_items_ != expected_items_) {
      backward_seed_ = torch::full({}, 1.0 / double(expected_items_), loss.options());
      seed_items_ = expected_items_;
    }
    backward_through(*model_, loss, backward_seed_);
  } else {
    backward_through(*model_, loss);
  }
  if (options_.measure_noise && micro_steps_ == 1 && kind != MicroStep::Last && items > 0 &&
      noise_measurable())
    read_first_gradient(items);
}

void AccumulationEngine::read_first_gradient(int64_t items) {
  // .grad now holds this micro-batch's summed gradient, scaled by 1 / expected items when the
  // window announced its size: rescale its squared norm to that of the micro-batch's mean.
  std::vector<torch::Tensor> gradients;
  bool any = false;
  for (const auto& p : parameters_) {
    // A parameter outside this micro-batch's forward pass contributes nothing (yet).
    gradients.push_back(p.grad().defined() ? p.grad() : torch::Tensor());
    any = any || p.grad().defined();
  }
  if (!any)
    return;
  const double scale =
      expected_items_ > 0 ? double(expected_items_) / double(items) : 1.0 / double(items);
  first_items_ = items;
  first_sq_norm_ = noise_sq_norm(gradients, /*whole=*/false) * scale * scale;
}

bool AccumulationEngine::noise_measurable() const {
  if (!options_.precondition_noise)
    return true;
  return options_.shards ? options_.shards->preconditioner_settled() : !noise_weights_.empty();
}

double AccumulationEngine::noise_sq_norm(const std::vector<torch::Tensor>& gradients,
                                         bool whole) const {
  if (preconditioned_and_sharded()) {
    // The same per-tensor norms as below, then the same norm of them: bit for bit unsharded.
    const torch::Tensor norms = whole ? options_.shards->preconditioned_norms(gradients)
                                      : options_.shards->streamed_preconditioned_norms(gradients);
    if (!norms.defined())
      return 0;
    const double norm = norms.norm().item<double>();
    return norm * norm;
  }
  std::vector<torch::Tensor> measured;
  measured.reserve(gradients.size());
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (gradients[i].defined())
      measured.push_back(noise_weights_.empty() ? gradients[i] : gradients[i] * noise_weights_[i]);
  }
  if (measured.empty())
    return 0;
  // One fused call for all the per-tensor norms.
  const double norm = torch::stack(at::_foreach_norm(measured)).norm().item<double>();
  return norm * norm;
}

void AccumulationEngine::begin_window(int64_t global_samples, int64_t global_items) {
  // Inside a window only to re-announce it (a window restored from a checkpoint).
  const int64_t announced_items = task_.computes_own_loss() ? 0 : global_items;
  BB_INTERNAL_ASSERT(expected_samples_ == 0 || (expected_samples_ == global_samples &&
                                                expected_items_ == announced_items),
                     "begin_window() changed the window");
  BB_INTERNAL_ASSERT(global_samples > 0, "a window needs samples");
  BB_INTERNAL_ASSERT(global_items >= 0, "a window's item count cannot be negative");
  expected_samples_ = global_samples;
  // A module with its own loss says its items itself, after the fact.
  expected_items_ = announced_items;
}

WindowTotals AccumulationEngine::local_totals() const {
  WindowTotals local;
  local.counts = {samples_, items_, tally_.loss_sum(), tally_.correct()};
  local.stop = stop_requested_ ? 1.0 : 0.0;
  if (first_items_ > 0) {
    local.small_batches = 1;
    local.small_sq_norm = first_sq_norm_;
    local.small_inverse_items = 1.0 / double(first_items_);
  } else if (local_norm_available_ && micro_steps_ == 1 && items_ > 0 && noise_measurable()) {
    // The whole window is this rank's small batch; its gradients were its summed loss's (scaled
    // by 1 / expected when announced), so the measured squared norm takes scale^2.
    const double scale =
        expected_items_ > 0 ? double(expected_items_) / double(items_) : 1.0 / double(items_);
    local.small_batches = 1;
    local.small_inverse_items = 1.0 / double(items_);
    local.pre_reduction_norm_scale = scale * scale;
    if (preconditioned_and_sharded()) {
      local.pre_reduction_norm_weight = [shards = options_.shards](size_t parameter) {
        return shards->next_preconditioner(parameter);
      };
    } else if (options_.precondition_noise) {
      local.pre_reduction_norm_weight = [this](size_t parameter) {
        return noise_weights_[parameter];
      };
    }
  }
  return local;
}

UpdateStats AccumulationEngine::finish_gradients() {
  std::vector<torch::Tensor> gradients;
  gradients.reserve(parameters_.size());
  for (auto& p : parameters_) {
    // A parameter that took no part in the forward pass has no gradient; a zero one keeps the
    // collective calls identical on every rank.
    if (!p.grad().defined())
      p.mutable_grad() = torch::zeros_like(p);
    gradients.push_back(p.grad());
  }
  const WindowTotals local = local_totals();
  // Every rank takes the whole window's preconditioner stream, used or not, and before it waits
  // for the all-reduce: a rank whose gradients the reducer reads before their all-reduce takes
  // it bucket by bucket (inside its last backward pass, or inside reduce()), and the others'
  // shares of it must not wait behind that all-reduce.
  const bool streams = options_.measure_noise && preconditioned_and_sharded();
  if (streams && !local.pre_reduction_norm_weight)
    options_.shards->finish_preconditioner_stream();
  const WindowTotals global = reducer_.reduce(gradients, local);
  if (streams)
    options_.shards->finish_preconditioner_stream();
  const Counts& counts = global.counts;
  if (task_.computes_own_loss() && counts.items == 0) {
    throw Error(ErrorKind::Model,
                "model '" + as_user_module(*model_)->name() +
                    "' counted no items in a whole update window (" +
                    std::to_string(counts.samples) + " samples)",
                "return the number of items its loss_sum adds up, e.g. targets.numel()");
  }
  BB_INTERNAL_ASSERT(counts.items > 0, "an update window with no items on any rank");
  // The reduced counts check that every rank fed exactly the samples (and, when announced,
  // the items) the plan says; announced items were already applied by the backward seed.
  BB_INTERNAL_ASSERT(expected_samples_ == 0 || counts.samples == expected_samples_,
                     "the window saw " + std::to_string(counts.samples) +
                         " samples, the plan says " + std::to_string(expected_samples_));
  BB_INTERNAL_ASSERT(expected_items_ == 0 || counts.items == expected_items_,
                     "the window saw " + std::to_string(counts.items) + " items, the plan says " +
                         std::to_string(expected_items_));

  UpdateStats stats;
  stats.counts = counts;
  stats.micro_steps = micro_steps_;
  stats.stop_requested = global.stop > 0;
  if (global.small_batches > 0 && global.small_inverse_items > 0) {
    stats.small_batch = global.small_batches / global.small_inverse_items;
    stats.small_batch_sq_norm = global.small_sq_norm / global.small_batches;
  }

  // Normalise once, by what was really seen on all ranks (unless the scaled loss already did).
  if (options_.per_micro_batch_mean_for_tests) {
    for (auto& g : gradients)
      g.div_(double(micro_steps_));
  } else if (expected_items_ == 0) {
    for (auto& g : gradients)
      g.div_(double(counts.items));
  }
  // One fused call for all the per-tensor norms: at small micro-batches the per-op dispatch
  // cost matters as much as the arithmetic.
  stats.grad_norm =
      gradients.empty() ? 0.0 : torch::stack(at::_foreach_norm(gradients)).norm().item<double>();
  // A rank without samples in a short window read no preconditioner; every rank reads the
  // same (the optimizer's state is the same everywhere), so all judge the update alike.
  if (options_.measure_noise && options_.precondition_noise && !options_.shards &&
      noise_weights_.empty())
    noise_weights_ = adam_preconditioner(optimizer_, parameters_);
  if (!noise_measurable())
    stats.small_batch = 0;  // preconditioned, before the optimizer's first step
  if (stats.small_batch > 0) {
    stats.big_batch_sq_norm = options_.precondition_noise ? noise_sq_norm(gradients, true)
                                                          : stats.grad_norm * stats.grad_norm;
  }
  // Both are global (reduced) values, so every rank reaches the same verdict.
  stats.non_finite = !std::isfinite(stats.loss()) || !std::isfinite(stats.grad_norm);
  if (stats.non_finite)
    return stats;
  if (options_.clip_norm > 0 && stats.grad_norm > options_.clip_norm) {
    // PyTorch's clip_grad_norm_ coefficient, so clipped runs match it.
    const double coefficient = options_.clip_norm / (stats.grad_norm + 1e-6);
    for (auto& g : gradients)
      g.mul_(coefficient);
  }
  return stats;
}

UpdateStats AccumulationEngine::update(double lr) {
  UpdateStats stats = finish_gradients();
  if (stats.skipped()) {
    discard();
  } else {
    apply(lr);
  }
  return stats;
}

void AccumulationEngine::apply(double lr, const std::optional<AdamHyperparameters>& adam) {
  set_learning_rate(optimizer_, lr);
  if (adam)
    set_adam_hyperparameters(optimizer_, *adam);
  optimizer_.step();
  if (options_.shards)
    options_.shards->share_updated_parameters();
  discard();
}

WindowState AccumulationEngine::window_state() const {
  return {micro_steps_,
          {samples_, items_, tally_.loss_sum(), tally_.correct()},
          first_items_,
          first_sq_norm_};
}

void AccumulationEngine::restore_window(const WindowState& state,
                                        const std::vector<torch::Tensor>& gradients) {
  BB_INTERNAL_ASSERT(gradients.size() == parameters_.size(),
                     "window gradients do not match the parameters");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].grad().defined())
      parameters_[i].mutable_grad() = torch::zeros_like(parameters_[i]);
    parameters_[i].mutable_grad().copy_(gradients[i]);
  }
  micro_steps_ = state.micro_steps;
  samples_ = state.counts.samples;
  items_ = state.counts.items;
  first_items_ = state.first_items;
  first_sq_norm_ = state.first_sq_norm;
  if (options_.measure_noise && options_.precondition_noise && !options_.shards)
    noise_weights_ = adam_preconditioner(optimizer_, parameters_);
  tally_.reset(state.counts.loss_sum, state.counts.correct);
}

void AccumulationEngine::discard() {
  for (auto& p : parameters_) {
    if (reducer_.keeps_gradient_storage()) {
      p.mutable_grad().zero_();  // views into the reducer's buckets: keep them
    } else {
      // Released: the next window's first backward then hands over its gradient instead of
      // adding it to zeros, two passes over every gradient fewer per update.
      p.mutable_grad() = torch::Tensor();
    }
  }
  tally_.reset();
  samples_ = 0;
  items_ = 0;
  micro_steps_ = 0;
  expected_samples_ = 0;
  expected_items_ = 0;
  first_items_ = 0;
  first_sq_norm_ = 0;
  noise_weights_.clear();
  if (options_.shards)
    options_.shards->reset_preconditioner_stream();
}

bool run_micro_steps(AccumulationEngine& engine, BatchAssembler& assembler,
                     const std::vector<int64_t>& order, const UpdateWindow& window, int64_t first,
                     const MicroStepCallback& after_micro_step,
                     const std::vector<int64_t>* rank_rows) {
  // The plan knows the window's samples on every rank, and the data their items (one per
  // image; the target tokens of a token row), so backward is seeded with 1 / items.
  engine.begin_window(window.size, assembler.items(order, window.begin, window.size));
  // This rank's samples: its share of the epoch's order, or the same share repacked.
  const std::vector<int64_t>& rows = rank_rows ? *rank_rows : order;
  const size_t count = window.micro_batch_sizes.size();
  int64_t position = rank_rows ? 0 : window.rank_begin;
  for (size_t i = 0; i < static_cast<size_t>(first); ++i)
    position += window.micro_batch_sizes[i];
  // The next micro-batch is gathered while this one trains; leaving early (a checkpoint stop,
  // an out-of-memory error) waits for the gather in flight.
  struct DrainOnExit {
    BatchAssembler& assembler;
    ~DrainOnExit() { assembler.drain(); }
  } drain_on_exit{assembler};
  if (static_cast<size_t>(first) < count)
    assembler.prefetch(rows, position, window.micro_batch_sizes[first]);
  for (size_t i = static_cast<size_t>(first); i < count; ++i) {
    const int64_t size = window.micro_batch_sizes[i];
    const Batch batch = assembler.take();
    position += size;
    if (i + 1 < count)
      assembler.prefetch(rows, position, window.micro_batch_sizes[i + 1]);
    engine.micro_step(batch, i + 1 == count ? AccumulationEngine::MicroStep::Last
                                            : AccumulationEngine::MicroStep::Accumulate);
    if (after_micro_step &&
        !after_micro_step(static_cast<int64_t>(i) + 1, static_cast<int64_t>(count)))
      return false;
  }
  return true;
}

}  // namespace bigbatch
