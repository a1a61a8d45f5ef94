#include "train/user_loop.h"

#include <algorithm>

#include "batching/batch_plan.h"
#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "data/sampler.h"
#include "optim/optimizer.h"
#include "train/run_agreement.h"
#include "train/run_engine.h"
#include "train/train_step.h"

namespace bigbatch {

namespace {

// The caller's tensors, registered as one module's parameters (the same tensors, not copies), so
// the engine's reducer, clipping and optimizer see them as a model's.
class ParameterHolderImpl : public torch::nn::Module {
 public:
  explicit ParameterHolderImpl(const NamedTensors& parameters) {
    for (const auto& [name, tensor] : parameters) {
      // A module's parameter names hold no dots; the caller's names ("blocks.0.weight") do.
      std::string key = name;
      std::replace(key.begin(), key.end(), '.', '/');
      register_parameter(key, tensor, tensor.requires_grad());
    }
  }
};

// The one global batch a loop of the user's trains, planned over the dataset.
ResolvedRun plan_user_loop(const TrainConfig& config, int64_t dataset_size, int64_t world_size) {
  check_config(dataset_size > 0, "the dataset holds no samples",
               "give a dataset with at least one sample");
  check_config(config.global_batch_schedule.empty() && !config.global_batch_auto &&
                   config.lr_scaling != LrScaling::AdaScale,
               "a loop of your own trains one global batch here; a batch schedule, AdaScale and "
               "the automatic batch need the engine's loop",
               "give global_batch=N (and micro_batch=M), or train with bigbatch.train");
  check_config(!config.micro_batch_auto, "micro_batch='auto' measures the engine's own model",
               "give micro_batch=N");
  return resolve_run(config, dataset_size, world_size, /*items_per_sample=*/1);
}

// Each window's samples split into micro-batches of the plan, as dataset indices.
std::vector<std::vector<int64_t>> micro_batch_indices(const std::vector<int64_t>& order,
                                                      const UpdateWindow& window) {
  std::vector<std::vector<int64_t>> out;
  int64_t position = window.rank_begin;
  for (const int64_t size : window.micro_batch_sizes) {
    out.emplace_back(order.begin() + position, order.begin() + position + size);
    position += size;
  }
  return out;
}

}  // namespace

UserLoop::UserLoop(const TrainConfig& config, int64_t dataset_size, NamedTensors parameters,
                   JobPlace job)
    : config_(config),
      job_(std::move(job)),
      dataset_size_(dataset_size),
      resolved_(plan_user_loop(config_, dataset_size, job_.world_size)) {
  NamedTensors trainable;
  for (auto& named : parameters) {
    if (named.second.requires_grad())
      trainable.push_back(std::move(named));
  }
  check_config(!trainable.empty(), "the model has no parameters that require a gradient",
               "pass the module whose parameters train (model.parameters() is empty here)");
  config_.resolve_default_rate();
  schedule_ = make_run_schedule(resolved_);
  holder_ = torch::nn::Sequential();
  holder_->register_module("user", std::make_shared<ParameterHolderImpl>(trainable));
  reducer_ = make_reducer(job_, config_);
  // Ranks started differently stop together, each naming what differs; then every rank starts
  // from rank 0's weights, whatever its own initialisation drew.
  check_ranks_agree(*reducer_, [&] {
    RankDescription description = describe_configuration(config);
    description.emplace_back("dataset size", std::to_string(dataset_size));
    for (const auto& [name, tensor] : trainable)
      description.emplace_back("parameter " + name, c10::str(tensor.sizes()));
    return description;
  });
  if (job_.world_size > 1) {
    std::vector<torch::Tensor> weights;
    for (const auto& named : trainable)
      weights.push_back(named.second);
    torch::NoGradGuard no_grad;
    reducer_->broadcast_from_first_rank(weights);
  }
  OptimizerSettings settings = OptimizerSettings::from(config_);
  if (const auto& adam = resolved_.adam) {
    settings.adam_beta1 = adam->beta1;
    settings.adam_beta2 = adam->beta2;
    settings.adam_eps = adam->eps;
  }
  optimizer_ = make_optimizer(settings, holder_->parameters());
  EngineOptions options;
  options.clip_norm = config_.clip_norm;
  options.measure_noise = config_.noise_scale;
  options.precondition_noise = config_.preconditioned_noise();
  engine_ = std::make_unique<AccumulationEngine>(holder_, *optimizer_, *reducer_, options);
}

std::vector<std::vector<int64_t>> UserLoop::next_window() {
  check_config(window_.size == 0 || micro_steps_done_ == 0,
               "a window was asked for while the last one has backward passes and no step",
               "call step() after the window's micro-batches");
  check_config(!complete(), "the run is complete (its epochs or max_updates are reached)",
               "give more epochs=, or stop iterating");
  const BatchPlan& plan = schedule_->plan();
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (order_epoch_ != at_.epoch) {
      order_ = epoch_order(config_.seed, at_.epoch, dataset_size_,
                           config_.shuffle ? Shuffle::On : Shuffle::Off);
      order_epoch_ = at_.epoch;
    }
    window_ = window_at(plan, dataset_size_, config_.last_window, at_.position_in_epoch, job_.rank);
    if (window_.size > 0)
      break;
    // The epoch is used up (or its rest is dropped): the next one starts.
    ++at_.epoch;
    at_.update_in_epoch = 0;
    at_.position_in_epoch = 0;
  }
  BB_INTERNAL_ASSERT(window_.size > 0, "an epoch without a window");
  // Items are counted as the micro-batches come: the reduced sum is divided by their total.
  engine_->begin_window(window_.size, /*global_items=*/0);
  micro_steps_done_ = 0;
  return micro_batch_indices(order_, window_);
}

void UserLoop::backward(const torch::Tensor& loss_sum, int64_t samples, int64_t items, bool last) {
  check_config(window_.size > 0, "backward() outside a window",
               "take the micro-batches from the accumulator's windows");
  check_config(loss_sum.defined() && loss_sum.numel() == 1,
               "the loss must be one number (the micro-batch's summed loss), got a tensor of " +
                   std::to_string(loss_sum.defined() ? loss_sum.numel() : 0) + " elements",
               "sum the loss over the micro-batch's items, e.g. "
               "F.cross_entropy(logits, targets, reduction='sum')");
  check_config(loss_sum.requires_grad(),
               "the loss does not require a gradient: it was computed outside autograd or "
               "detached",
               "compute it from the model's outputs, outside torch.no_grad()");
  check_config(items > 0,
               "a micro-batch must count at least one item, got " + std::to_string(items),
               "pass items= the number of targets its summed loss adds up");
  engine_->backward_loss(
      loss_sum.reshape({}), samples, items,
      last ? AccumulationEngine::MicroStep::Last : AccumulationEngine::MicroStep::Accumulate);
  ++micro_steps_done_;
}

UserLoopStep UserLoop::step() {
  check_config(window_.size > 0 && micro_steps_done_ > 0,
               "step() with no backward pass in the window",
               "call backward() for each micro-batch of the window first");
  const int64_t micro_batches = static_cast<int64_t>(window_.micro_batch_sizes.size());
  check_config(micro_steps_done_ == micro_batches,
               "the window has " + std::to_string(micro_batches) + " micro-batches and " +
                   std::to_string(micro_steps_done_) + " backward passes",
               "call backward() once per micro-batch of the window");
  UpdateStats stats = engine_->finish_gradients();
  feed_noise_scale(noise_, stats, schedule_->plan().global_batch_size);
  const UpdateRate rate = schedule_->rate(at_, {stats.counts.items, &noise_});
  if (stats.skipped())
    engine_->discard();
  else
    engine_->apply(rate.lr, rate.adam);
  schedule_->count(at_, rate, !stats.skipped());
  ++at_.step;
  ++at_.update_in_epoch;
  at_.position_in_epoch += window_.size;
  at_.samples_seen += stats.counts.samples;
  at_.items_seen += stats.counts.items;
  if (stats.skipped())
    ++at_.skipped_updates;

  UserLoopStep out;
  out.step = at_.step;
  out.epoch = at_.epoch;
  out.samples = stats.counts.samples;
  out.items = stats.counts.items;
  out.loss = stats.loss();
  out.grad_norm = stats.grad_norm;
  out.lr = rate.lr;
  out.skipped = stats.skipped();
  out.noise_scale = noise_.noise_scale().value_or(0.0);
  window_ = UpdateWindow{};
  micro_steps_done_ = 0;
  return out;
}

nlohmann::json UserLoop::identity() const {
  const BatchPlan& plan = schedule_->plan();
  return {{"dataset_size", dataset_size_},
          {"global_batch", plan.global_batch_size},
          {"world_size", plan.world_size},
          {"seed", config_.seed},
          {"shuffle", config_.shuffle},
          {"optimizer", to_string(config_.optimizer)},
          {"parameters", static_cast<int64_t>(engine_->parameters().size())}};
}

UserLoopState UserLoop::state() const {
  check_config(window_.size == 0,
               "the state is saved between updates, and a window is open (its micro-batches "
               "are not all stepped)",
               "save after step()");
  TrainingProgress at = at_;
  at.noise = noise_.state();
  return {{{"plan", identity()}, {"progress", progress_to_json(at)}},
          optimizer_state_bytes(*optimizer_)};
}

void UserLoop::load_state(const UserLoopState& state) {
  check_config(window_.size == 0 && at_.step == 0,
               "a state is loaded into a loop that has not trained yet",
               "make a new accumulator and load the state before its first window");
  const nlohmann::json& saved = state.progress;
  check_config(saved.is_object() && saved.contains("plan") && saved.contains("progress"),
               "the state holds no plan and progress", "give what state_dict() returned");
  const nlohmann::json now = identity();
  for (const auto& [key, value] : now.items()) {
    const nlohmann::json was = saved["plan"].value(key, nlohmann::json());
    check_config(was == value,
                 "the state was saved by a loop with " + key + " " + was.dump() +
                     "; this one has " + value.dump(),
                 "load it into a loop of the same plan, data and model");
  }
  TrainingProgress at = progress_from_json(saved["progress"], "(the state)");
  check_config(schedule_->inconsistency(at).empty(),
               "the state's progress does not fit the plan: " + schedule_->inconsistency(at),
               "give the state_dict() of a loop with this plan");
  load_optimizer_state_bytes(*optimizer_, state.optimizer, torch::kCPU);
  noise_.restore(at.noise);
  at_ = at;
}

}  // namespace bigbatch
