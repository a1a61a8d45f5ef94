#include "schedule/run_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/text.h"
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

std::optional<BatchCheck> RunSchedule::observe(TrainingProgress&, const UpdateObservation&) {
  return std::nullopt;
}

std::optional<BatchDecision> RunSchedule::proposal(const TrainingProgress&) const {
  return std::nullopt;
}

double RunSchedule::enter_branch(TrainingProgress&, TestBranch) {
  BB_INTERNAL_ASSERT(false, "only a regime that proposes has branches to enter");
  return 1;
}

void RunSchedule::settle(TrainingProgress&, const BatchTest&) {
  BB_INTERNAL_ASSERT(false, "only a regime that proposes has tests to settle");
}

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

std::string RunSchedule::status(const TrainingProgress&) const {
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
  return {lr_.lr_at(at.step), 1, lr_.adam_at(plan_.global_batch_size)};
}

std::string FixedSchedule::inconsistency(const TrainingProgress& at) const {
  return fixed_batch_inconsistency(at, /*count_updates=*/true);
}

// --- RampSchedule -----------------------------------------------------------------------------

RampSchedule::RampSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds,
                           GlobalBatchSchedule batches, int64_t reference_batch)
    : RunSchedule(std::move(plan), std::move(epoch), std::move(lr), bounds),
      batches_(std::move(batches)),
      reference_batch_(reference_batch) {
  // The betas follow the batch from the LR schedule's reference (adam_at), the rate from this one.
  BB_INTERNAL_ASSERT(
      !lr_.config().adam_at_reference || lr_.config().reference_batch == reference_batch_,
      "the ramp's reference batch differs from its LR schedule's");
}

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
  BatchChange change{plan_.global_batch_size, plan_for(global), lr_at(at.samples_seen, global),
                     rate_factors(at.samples_seen, global), lr_.adam_at(global)};
  replan(change.plan);
  return change;
}

UpdateRate RampSchedule::rate(const TrainingProgress& at, const GradientMeasure&) const {
  return {lr_at(at.samples_seen, plan_.global_batch_size), 1, lr_.adam_at(plan_.global_batch_size)};
}

// The scaling rule from the reference batch to `global_batch`, times the LR schedule's curve at
// samples_seen / reference_batch: warmup and decay run on data seen, so nothing jumps at a
// switch but the rule's factor.
double RampSchedule::lr_at(int64_t samples_seen, int64_t global_batch) const {
  const double position = double(samples_seen) / double(reference_batch_);
  return lr_.lr_at_position(position) *
         scale_lr(1.0, reference_batch_, global_batch, lr_.config().scaling);
}

std::string RampSchedule::rate_factors(int64_t samples_seen, int64_t global_batch) const {
  const double position = double(samples_seen) / double(reference_batch_);
  const LrScaling scaling = lr_.config().scaling;
  return format_significant(lr_.lr_at_position(position), 4) + " (the schedule at batch " +
         std::to_string(reference_batch_) + ") x " +
         format_significant(scale_lr(1.0, reference_batch_, global_batch, scaling), 4) + " (" +
         to_string(scaling) + " rule, " + std::to_string(global_batch) + " / " +
         std::to_string(reference_batch_) + ")";
}

double RampSchedule::doubling_rate_factor(int64_t global_batch) const {
  return scale_lr(1.0, reference_batch_, 2 * global_batch, lr_.config().scaling) /
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

// --- AutoBatchSchedule ------------------------------------------------------------------------

AutoBatchSchedule::AutoBatchSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr,
                                     RunBounds bounds, int64_t reference_batch, GrowthRule rule)
    : RampSchedule(plan, std::move(epoch), std::move(lr), bounds,
                   GlobalBatchSchedule::parse(replay_schedule(plan.global_batch_size, {})),
                   reference_batch),
      start_batch_(plan.global_batch_size),
      rule_(std::move(rule)) {}

namespace {
// Where a test first fits the tests' budget, in words: "from sample 9728", or never.
std::string fits_from(int64_t allowed_from) {
  return allowed_from == std::numeric_limits<int64_t>::max()
             ? std::string("at no sample a run reaches")
             : "from sample " + std::to_string(allowed_from);
}
}  // namespace

// The cost first (given, or timed over the first updates), then a check every
// kGrowthCheckEvery updates once the noise scale has settled; a doubling becomes a step of the
// ramp at the next update's first sample.
std::optional<BatchCheck> AutoBatchSchedule::observe(TrainingProgress& at,
                                                     const UpdateObservation& seen) {
  BatchGrowthState& growth = at.growth;
  if (rule_.update_cost) {
    growth.update_cost = *rule_.update_cost;
  } else if (tally_update_cost(growth, at.step, seen.timing) && seen.first_rank_value) {
    // Every rank's tally completes at the same update (whole windows are counted alike); each
    // timed its own, and all take rank 0's.
    growth.update_cost = seen.first_rank_value(growth.update_cost);
  }
  const int64_t batch = plan_.global_batch_size;
  if (growth.update_cost < 0 || seen.noise == nullptr || growth.proposal ||
      updates_to_next_check(growth, at.step) > 0 || 2 * batch > rule_.max_global_batch)
    return std::nullopt;
  std::optional<NoiseScaleSummary> noise = seen.noise->summary();
  if (!noise || noise->updates < kNoiseScaleSettledUpdates)
    return std::nullopt;
  // A language model's noise scale counts tokens (its mean is over them); the batch counts
  // samples: the noise scale in samples is the tokens' over the mean tokens per sample.
  if (epoch_.items_per_sample > 0) {
    for (double* value : {&noise->value, &noise->low, &noise->high, &noise->run_average})
      *value /= epoch_.items_per_sample;
  }
  BatchCheck check = judge_growth(rule_, batch, *noise, growth.update_cost);
  check.step = at.step;
  check.samples_seen = at.samples_seen;
  growth.last_check_step = at.step;
  growth.last_gain = check.goodput_gain;
  if (!check.grow)
    return check;
  const BatchDecision decision{at.step,        at.samples_seen,    batch,
                               check.proposed, noise->low,         noise->value,
                               noise->high,    growth.update_cost, check.goodput_gain};
  if (!rule_.branch_test) {
    growth.decisions.push_back(decision);
    batches_ = GlobalBatchSchedule::parse(replay_schedule(start_batch_, growth.decisions));
    return check;
  }
  // Proposed: the next update boundary trains both batches on the same samples first.
  check.grow = false;
  check.test_samples = branch_test_samples(batch, epoch_.dataset_size - at.position_in_epoch);
  if (check.test_samples == 0) {
    check.reason = "the epoch has too few samples left to test " + std::to_string(check.proposed) +
                   " (" + std::to_string(kFewestBranchTestUpdates) + " updates of it): checked " +
                   "again in " + count_of(kGrowthCheckEvery, "update");
    growth.rejected_in_a_row = 0;  // the next check comes at the usual wait
    return check;
  }
  // The tests' budget: proposed only when the test, lost in full, keeps the losing branches'
  // samples within --growth-test-budget of the samples trained.
  const int64_t thrown = thrown_away_samples(growth.tests);
  const int64_t worst_cost = branch_test_worst_cost(rule_.control, check.test_samples);
  const int64_t allowed_from =
      test_budget_allows_from(rule_.test_budget, thrown, worst_cost, check.test_samples);
  if (at.samples_seen < allowed_from) {
    check.reason =
        "testing " + std::to_string(check.proposed) + " (" + std::to_string(check.test_samples) +
        " samples a branch) waits for the tests' budget: " +
        format_significant(100 * rule_.test_budget, 3) + "% of the samples trained, " +
        std::to_string(thrown) + " thrown away so far; it fits " + fits_from(allowed_from);
    check.test_samples = 0;
    return check;
  }
  // The rest of the run must be able to repay the test: kept, the doubling saves 1 - 1/gain of
  // the compute of the samples after it; lost, the test threw its worst cost away.
  const int64_t after = samples_left(at) - check.test_samples;
  if (after < samples_to_repay_test(check.goodput_gain, worst_cost)) {
    check.reason = "testing " + std::to_string(check.proposed) + " (" +
                   std::to_string(check.test_samples) + " samples a branch) cannot repay itself: ";
    if (after <= 0) {
      check.reason += "the run ends within it";
    } else {
      const double saved = double(after) * (1 - 1 / check.goodput_gain);
      check.reason += format_fixed(check.goodput_gain, 3) + "x the goodput over the " +
                      std::to_string(after) +
                      " samples the run has left after it saves the compute of " +
                      std::to_string(int64_t(saved)) + ", less than the " +
                      std::to_string(worst_cost) + " a lost test throws away";
    }
    check.test_samples = 0;
    return check;
  }
  growth.proposal = decision;
  growth.proposal->test_samples = check.test_samples;
  return check;
}

int64_t AutoBatchSchedule::samples_left(const TrainingProgress& at) const {
  const int64_t by_epochs = bounds_.epochs * epoch_.dataset_size - at.samples_seen;
  const int64_t batch = plan_.global_batch_size;
  const int64_t updates = bounds_.total_updates - at.step;
  // (compared before multiplying: an unbounded update count must not overflow)
  const int64_t by_updates = updates > by_epochs / batch ? by_epochs : updates * batch;
  return std::max<int64_t>(0, std::min(by_epochs, by_updates));
}

std::optional<BatchDecision> AutoBatchSchedule::proposal(const TrainingProgress& at) const {
  return at.growth.proposal;
}

double AutoBatchSchedule::enter_branch(TrainingProgress& at, TestBranch branch) {
  BatchGrowthState& growth = at.growth;
  BB_INTERNAL_ASSERT(growth.proposal.has_value(), "a branch needs a proposal to test");
  if (branch == TestBranch::Doubled)
    growth.decisions.push_back(*growth.proposal);
  growth.proposal.reset();
  batches_ = GlobalBatchSchedule::parse(replay_schedule(start_batch_, growth.decisions));
  branch_rate_factor_ = branch == TestBranch::Control ? control_rate_factor() : 1;
  return branch_rate_factor_;
}

double AutoBatchSchedule::control_rate_factor() const {
  return doubling_rate_factor(plan_.global_batch_size) / 2;
}

UpdateRate AutoBatchSchedule::rate(const TrainingProgress& at,
                                   const GradientMeasure& measured) const {
  UpdateRate rate = RampSchedule::rate(at, measured);
  rate.lr *= branch_rate_factor_;
  return rate;
}

void AutoBatchSchedule::settle(TrainingProgress& at, const BatchTest& test) {
  BatchGrowthState& growth = at.growth;
  growth.tests.push_back(test);
  growth.rejected_in_a_row = test.kept ? 0 : growth.rejected_in_a_row + 1;
  growth.last_check_step = at.step;  // the wait for the next check starts after the test
  batches_ = GlobalBatchSchedule::parse(replay_schedule(start_batch_, growth.decisions));
  branch_rate_factor_ = 1;
  RampSchedule::restore(at);  // the kept branch's batch
}

// What is left of the run's samples at the batch in force (it may still grow: an upper bound).
RunLength AutoBatchSchedule::expected_length(const TrainingProgress& at) const {
  RunLength length = RampSchedule::expected_length(at);
  const int64_t global = plan_.global_batch_size;
  const int64_t left = samples_left(at);
  length.total_updates = std::min(bounds_.total_updates, at.step + (left + global - 1) / global);
  return length;
}

// What the controller waits for, in the order observe asks: the update's cost, the wait
// after the last check (longer after rejected tests), the noise scale's settling; a proposal
// is tested at the next update.
std::string AutoBatchSchedule::status(const TrainingProgress& at) const {
  const BatchGrowthState& growth = at.growth;
  if (2 * plan_.global_batch_size > rule_.max_global_batch)
    return "auto: at its limit";
  if (growth.proposal)
    return "auto: testing " + std::to_string(growth.proposal->to_batch);
  if (!rule_.update_cost && growth.update_cost < 0)
    return "auto: timing updates";
  const int64_t wait = updates_to_next_check(growth, at.step);
  return wait > 0 ? "auto: check in " + std::to_string(wait) : "auto: noise settling";
}

// The batches taken and what they saved against staying at the first: the updates the same
// samples take at the starting batch (epochs of whole windows and a short last one), counted,
// not predicted.

std::string AutoBatchSchedule::summary(const TrainingProgress& at) const {
  const BatchGrowthState& growth = at.growth;
  // What the branch tests cost: the losing branches' samples, trained and thrown away.
  const int64_t losing_samples = thrown_away_samples(growth.tests);
  const std::string tests =
      growth.tests.empty() ? std::string()
                           : "; " + count_of(int64_t(growth.tests.size()), "branch test") + " (" +
                                 std::to_string(growth.decisions.size()) + " kept) trained " +
                                 std::to_string(losing_samples) + " samples more";
  if (growth.decisions.empty()) {
    std::string why;
    if (!growth.tests.empty()) {
      const BatchTest& last = growth.tests.back();
      why = "the branch tests found the doubled batch worse (the last: loss " +
            format_significant(last.doubled_loss, 4) + " at " +
            std::to_string(last.proposal.to_batch) + " against " +
            format_significant(last.current_loss, 4) + ", more than " +
            format_significant(last.bound, 2) + " worse)";
    } else if (growth.update_cost < 0) {
      why = "the update's cost was not measured yet (" +
            std::to_string(kCostWarmupUpdates + kCostCalibrationUpdates) + " updates)";
    } else if (growth.last_gain >= 1 + rule_.threshold && rule_.branch_test) {
      // Proposed, never tested: the test did not fit the budget, the epoch's samples left, or
      // the run's samples that could repay it.
      const int64_t test_samples = branch_test_samples(start_batch_, epoch_.dataset_size);
      const int64_t allowed_from = test_budget_allows_from(
          rule_.test_budget, 0, branch_test_worst_cost(rule_.control, test_samples), test_samples);
      why = "doubling predicted " + format_fixed(growth.last_gain, 3) +
            "x the goodput at the last check, but ";
      why += at.samples_seen < allowed_from
                 ? "its branch test (" + std::to_string(test_samples) +
                       " samples a branch) fits the tests' budget (" +
                       format_significant(100 * rule_.test_budget, 3) +
                       "% of the samples trained) only " + fits_from(allowed_from) +
                       " (a longer run, or a larger --growth-test-budget, lets it test)"
                 : std::string(
                       "its branch test did not fit the epoch's samples left, or the "
                       "run had too few left after it to repay it (each batch_check "
                       "record in metrics.jsonl says which)");
    } else if (growth.last_gain > 0) {
      why = "doubling predicted " + format_fixed(growth.last_gain, 3) +
            "x the goodput at the last check, under the " + format_fixed(1 + rule_.threshold, 3) +
            "x it takes (an update costs " + format_significant(growth.update_cost, 4) +
            " samples of compute)";
    } else if (growth.last_check_step > 0) {
      why =
          "the last check could not judge or could not double (its batch_check record in "
          "metrics.jsonl says why)";
    } else if (2 * start_batch_ > rule_.max_global_batch) {
      why = "--max-global-batch " + std::to_string(rule_.max_global_batch) + " allows no doubling";
    } else {
      why = "no check yet (the noise scale needs " + std::to_string(kNoiseScaleSettledUpdates) +
            " measured updates, and checks come every " + std::to_string(kGrowthCheckEvery) + ")";
    }
    return "automatic batch: stayed at " + std::to_string(start_batch_) + ": " + why + tests;
  }
  std::string path = std::to_string(start_batch_);
  for (const BatchDecision& d : growth.decisions)
    path += " -> " + std::to_string(d.to_batch);
  const int64_t size = epoch_.dataset_size;
  const int64_t per_epoch = (size + start_batch_ - 1) / start_batch_;
  const int64_t at_start =
      at.epoch * per_epoch + (at.position_in_epoch + start_batch_ - 1) / start_batch_;
  return "automatic batch: " + path + "; " + count_of(at.step, "update") + " where " +
         std::to_string(start_batch_) + " throughout takes " + count_of(at_start, "update") +
         " for the same " + std::to_string(at.samples_seen) + " samples (" +
         format_fixed(double(at_start) / double(std::max<int64_t>(1, at.step)), 2) + "x)" + tests +
         "; replay it with --global-batch-schedule \"" +
         replay_schedule(start_batch_, growth.decisions) + "\"" +
         (rule_.holdout > 0 ? " --growth-holdout " + std::to_string(rule_.holdout) : "");
}

// A damaged log is left for the trainer's inconsistency() check to name.
bool AutoBatchSchedule::restore(const TrainingProgress& at) {
  if (!inconsistency(at).empty())
    return false;
  batches_ = GlobalBatchSchedule::parse(replay_schedule(start_batch_, at.growth.decisions));
  branch_rate_factor_ = 1;
  return RampSchedule::restore(at);
}

// The decision log must be a chain of doublings from the starting batch, each after the one
// before and none after the position the checkpoint stands at.
std::string AutoBatchSchedule::inconsistency(const TrainingProgress& at) const {
  int64_t batch = start_batch_;
  int64_t samples = 0;
  for (size_t i = 0; i < at.growth.decisions.size(); ++i) {
    const BatchDecision& d = at.growth.decisions[i];
    const std::string field = "progress.growth.decisions[" + std::to_string(i) + "]";
    if (d.from_batch != batch || d.to_batch != 2 * batch)
      return field + " goes " + std::to_string(d.from_batch) + " -> " + std::to_string(d.to_batch) +
             " where the batch was " + std::to_string(batch);
    if (d.samples_seen <= samples || d.samples_seen > at.samples_seen)
      return field + " is at sample " + std::to_string(d.samples_seen) +
             ", not between the decision before it and progress.samples_seen " +
             std::to_string(at.samples_seen);
    batch = d.to_batch;
    samples = d.samples_seen;
  }
  if (at.global_batch != 0 && at.global_batch != batch && at.global_batch != batch / 2)
    return "progress.global_batch " + std::to_string(at.global_batch) +
           " is not the decision log's batch " + std::to_string(batch);
  return {};
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
