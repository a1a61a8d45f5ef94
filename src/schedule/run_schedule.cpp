#include "schedule/run_schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "schedule/adascale.h"

namespace bigbatch {

// --- RunSchedule: one global batch unless a regime says otherwise -----------------------------

RunSchedule::RunSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds)
    : plan_(std::move(plan)), epoch_(std::move(epoch)), lr_(std::move(lr)), bounds_(bounds) {}

int64_t RunSchedule::global_batch_at(const TrainingProgress&) const {
  return plan_.global_batch_size;
}

std::optional<BatchChange> RunSchedule::plan_update(const TrainingProgress&) {
  return std::nullopt;
}

void RunSchedule::count(TrainingProgress&, const UpdateRate&, bool) const {}

bool RunSchedule::complete(const TrainingProgress& at) const {
  return at.epoch >= bounds_.epochs || at.step >= bounds_.total_updates;
}

RunLength RunSchedule::expected_length(const TrainingProgress&) const {
  return {epoch_.updates_per_epoch, bounds_.total_updates, bounds_.epochs};
}

double RunSchedule::epoch_progress(const TrainingProgress& at) const {
  return double(at.update_in_epoch) / double(epoch_.updates_per_epoch);
}

std::string RunSchedule::summary(const TrainingProgress&) const {
  return {};
}

void RunSchedule::set_micro_batch(int64_t micro) {
  replan(plan_.with_micro_batch(micro));
}

bool RunSchedule::restore(const TrainingProgress&) {
  return false;
}

std::string RunSchedule::inconsistency(const TrainingProgress&) const {
  return {};
}

void RunSchedule::replan(BatchPlan plan) {
  epoch_ = plan_epoch(plan, epoch_.dataset_size, epoch_.last_window, epoch_.items_per_sample);
  plan_ = std::move(plan);
}

// Under one global batch the counters follow from each other: every window of an epoch but its
// last is full, and an epoch has at most one more update than its full windows. (A checkpoint
// written as a run diverges in an epoch's short last window stands at the epoch's end: its
// position is the dataset's size.)
std::string RunSchedule::fixed_batch_inconsistency(const TrainingProgress& at,
                                                   bool count_updates) const {
  const int64_t global = plan_.global_batch_size;
  const int64_t size = epoch_.dataset_size;
  const int64_t most_per_epoch = (size + global - 1) / global;
  if (at.update_in_epoch > most_per_epoch ||
      at.position_in_epoch != std::min(at.update_in_epoch * global, size)) {
    return "progress.position_in_epoch " + std::to_string(at.position_in_epoch) + " where update " +
           std::to_string(at.update_in_epoch) + " of an epoch of " +
           std::to_string(most_per_epoch) + " updates of " + std::to_string(global) +
           " samples starts";
  }
  if (count_updates && at.step > (at.epoch + 1) * most_per_epoch) {
    return "progress.step " + std::to_string(at.step) + " in epoch " +
           std::to_string(at.epoch + 1) + ", more updates than epochs of " +
           std::to_string(most_per_epoch) + " updates hold";
  }
  if (at.samples_seen > (at.epoch + 1) * size) {
    return "progress.samples_seen " + std::to_string(at.samples_seen) + " in epoch " +
           std::to_string(at.epoch + 1) + ", more samples than epochs of " + std::to_string(size) +
           " hold";
  }
  return {};
}

// --- FixedSchedule ----------------------------------------------------------------------------

UpdateRate FixedSchedule::rate(const TrainingProgress& at, const GradientMeasure&) const {
  return {lr_.lr_at(at.step), 1};
}

std::string FixedSchedule::inconsistency(const TrainingProgress& at) const {
  return fixed_batch_inconsistency(at, /*count_updates=*/true);
}

// --- RampSchedule -----------------------------------------------------------------------------

RampSchedule::RampSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds,
                           GlobalBatchSchedule batches, int64_t reference_batch)
    : RunSchedule(std::move(plan), std::move(epoch), std::move(lr), bounds),
      batches_(std::move(batches)),
      reference_batch_(reference_batch) {}

int64_t RampSchedule::global_batch_at(const TrainingProgress& at) const {
  return batches_.global_batch_at({at.samples_seen, at.epoch, at.position_in_epoch},
                                  epoch_.dataset_size);
}

// The same micro-batch (after any back-off), accumulation re-derived.
BatchPlan RampSchedule::plan_for(int64_t global_batch) const {
  return plan_for_ramp_step(global_batch, plan_.micro_batch_size, plan_.world_size);
}

// At the first update boundary past a threshold, the next step's plan. A window resumed from a
// checkpoint began under the batch that the same position selects, so it continues unchanged.
std::optional<BatchChange> RampSchedule::plan_update(const TrainingProgress& at) {
  const int64_t global = global_batch_at(at);
  if (global == plan_.global_batch_size)
    return std::nullopt;
  BatchChange change{plan_.global_batch_size, plan_for(global), lr_at(at.samples_seen, global)};
  replan(change.plan);
  return change;
}

UpdateRate RampSchedule::rate(const TrainingProgress& at, const GradientMeasure&) const {
  return {lr_at(at.samples_seen, plan_.global_batch_size), 1};
}

// The scaling rule from the reference batch to `global_batch`, times the LR schedule's curve at
// samples_seen / reference_batch: warmup and decay run on data seen, so nothing jumps at a
// switch but the rule's factor.
double RampSchedule::lr_at(int64_t samples_seen, int64_t global_batch) const {
  const double position = double(samples_seen) / double(reference_batch_);
  return lr_.lr_at_position(position) *
         scale_lr(1.0, reference_batch_, global_batch, lr_.config().scaling);
}

// The batch changes inside epochs: what is left of this one, at the current batch.
RunLength RampSchedule::expected_length(const TrainingProgress& at) const {
  RunLength length = RunSchedule::expected_length(at);
  const int64_t global = plan_.global_batch_size;
  length.updates_per_epoch =
      at.update_in_epoch + (epoch_.dataset_size - at.position_in_epoch + global - 1) / global;
  return length;
}

double RampSchedule::epoch_progress(const TrainingProgress& at) const {
  return double(at.position_in_epoch) / double(epoch_.dataset_size);
}

// The ramp's step of the last update done; the next update switches on from there (and
// announces it, exactly once).
bool RampSchedule::restore(const TrainingProgress& at) {
  if (at.global_batch <= 0 || at.global_batch == plan_.global_batch_size)
    return false;
  replan(plan_for(at.global_batch));
  return true;
}

std::string RampSchedule::inconsistency(const TrainingProgress&) const {
  return {};  // windows of several sizes: the counters do not follow from each other
}

// --- AdaScaleSchedule -------------------------------------------------------------------------

AdaScaleSchedule::AdaScaleSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds,
                                   int64_t reference_batch, int64_t scale_invariant_total)
    : RunSchedule(std::move(plan), std::move(epoch), std::move(lr), bounds),
      reference_batch_(reference_batch),
      scale_invariant_total_(scale_invariant_total) {}

// The gain from the averages that now include this update's gradients (1 until there are any).
UpdateRate AdaScaleSchedule::rate(const TrainingProgress& at,
                                  const GradientMeasure& measured) const {
  UpdateRate rate;
  if (measured.noise != nullptr && measured.noise->state().samples > 0) {
    rate.gain = adascale_gain(double(measured.items), double(reference_batch_),
                              measured.noise->trace(), measured.noise->gradient_sq())
                    .gain;
  }
  rate.lr = rate.gain * lr_.lr_at(static_cast<int64_t>(at.scale_invariant_step));
  return rate;
}

void AdaScaleSchedule::count(TrainingProgress& at, const UpdateRate& rate, bool applied) const {
  if (applied)
    at.scale_invariant_step += rate.gain;
}

bool AdaScaleSchedule::complete(const TrainingProgress& at) const {
  return RunSchedule::complete(at) ||
         at.scale_invariant_step >= double(scale_invariant_total_) - 1e-9;
}

// The run ends at a scale-invariant count: its length in updates follows the mean gain so far.
RunLength AdaScaleSchedule::expected_length(const TrainingProgress& at) const {
  RunLength length = RunSchedule::expected_length(at);
  const double mean_gain = std::max(1e-9, at.scale_invariant_step / double(at.step));
  length.total_updates = std::min(
      bounds_.total_updates,
      at.step + static_cast<int64_t>(std::ceil(
                    std::max(0.0, double(scale_invariant_total_) - at.scale_invariant_step) /
                    mean_gain)));
  length.epochs = (length.total_updates + epoch_.updates_per_epoch - 1) / epoch_.updates_per_epoch;
  return length;
}

std::string AdaScaleSchedule::summary(const TrainingProgress& at) const {
  return describe_adascale_run(at.step, at.scale_invariant_step,
                               double(plan_.global_batch_size) / double(reference_batch_));
}

// Updates per epoch are not counted: the run's length is in scale-invariant updates.
std::string AdaScaleSchedule::inconsistency(const TrainingProgress& at) const {
  return fixed_batch_inconsistency(at, /*count_updates=*/false);
}

// --- Plans of a ramp --------------------------------------------------------------------------

BatchPlan plan_for_ramp_step(int64_t global_batch, int64_t micro, int64_t world) {
  BatchRequest request;
  request.global_batch_size = global_batch;
  request.micro_batch_size = micro;
  request.world_size = world;
  try {
    return BatchPlan::resolve(request);
  } catch (const Error& e) {
    throw Error(e.kind(),
                "--global-batch-schedule step " + std::to_string(global_batch) + ": " + e.what(),
                e.hint());
  }
}

}  // namespace bigbatch
