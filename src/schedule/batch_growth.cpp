#include "schedule/batch_growth.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

bool tally_update_cost(BatchGrowthState& state, int64_t step, const UpdateTiming& timing) {
  if (state.update_cost >= 0 || step <= kCostWarmupUpdates || !timing.whole_window ||
      timing.samples <= 0) {
    return false;
  }
  UpdateCostTally& t = state.tally;
  ++t.updates;
  t.samples += timing.samples;
  t.gradient_seconds += timing.gradient_seconds;
  t.update_seconds += timing.update_seconds;
  if (t.updates < kCostCalibrationUpdates)
    return false;
  const double per_sample = t.gradient_seconds / double(t.samples);
  const double per_update = t.update_seconds / double(t.updates);
  state.update_cost = per_sample > 0 ? per_update / per_sample : 0;
  return true;
}

double goodput_gain(double batch, double noise_scale, double update_cost) {
  const double b = batch;
  const double r = update_cost;
  return 2 * (1 + b / noise_scale) * (r + b) / ((1 + 2 * b / noise_scale) * (r + 2 * b));
}

double goodput_optimal_batch(double noise_scale, double update_cost) {
  return std::sqrt(noise_scale * update_cost);
}

BatchCheck judge_growth(const GrowthRule& rule, int64_t batch, const NoiseScaleSummary& noise,
                        double update_cost) {
  BatchCheck check;
  check.batch = batch;
  check.proposed = 2 * batch;
  check.noise = noise;
  check.update_cost = update_cost;
  check.predicted_at = rule.predict_at;
  const BatchTradeoff now = batch_tradeoff(double(batch), noise.value);
  const BatchTradeoff doubled = batch_tradeoff(double(check.proposed), noise.value);
  check.updates_factor = doubled.steps_factor / now.steps_factor;
  check.samples_factor = doubled.samples_factor / now.samples_factor;
  if (check.proposed > rule.max_global_batch) {
    check.reason = "--max-global-batch " + std::to_string(rule.max_global_batch) + " is reached";
    return check;
  }
  if (check.proposed > rule.dataset_size) {
    check.reason = std::to_string(check.proposed) + " is more than the " +
                   std::to_string(rule.dataset_size) + " training samples";
    return check;
  }
  if (rule.must_divide && rule.dataset_size % check.proposed != 0) {
    check.reason = "--strict-batch: " + std::to_string(check.proposed) + " does not divide the " +
                   std::to_string(rule.dataset_size) + " training samples";
    return check;
  }
  const bool at_low = rule.predict_at == GrowthPrediction::BandLow;
  const double noise_scale = at_low ? noise.low : noise.value;
  if (!(noise_scale > 0) || !std::isfinite(noise_scale)) {
    check.reason = at_low ? "the noise scale's band reaches down to 0: too uncertain to grow on"
                          : "the noise scale's estimate is not above 0: nothing to grow on";
    return check;
  }
  check.goodput_gain = goodput_gain(double(batch), noise_scale, update_cost);
  check.grow = check.goodput_gain >= 1 + rule.threshold;
  if (!check.grow) {
    check.reason = "doubling predicts " + format_fixed(check.goodput_gain, 3) +
                   "x the goodput, under the " + format_fixed(1 + rule.threshold, 3) + "x it takes";
  }
  return check;
}

const NameTable<GrowthControl>& growth_control_names() {
  static const NameTable<GrowthControl> table{
      "growth control",
      "--growth-control",
      {{GrowthControl::Rate, "rate"}, {GrowthControl::Temperature, "temperature"}}};
  return table;
}

const NameTable<GrowthPrediction>& growth_prediction_names() {
  static const NameTable<GrowthPrediction> table{
      "growth prediction",
      "--growth-predict-at",
      {{GrowthPrediction::BandLow, "low"}, {GrowthPrediction::Estimate, "estimate"}}};
  return table;
}

const NameTable<GrowthTest>& growth_test_names() {
  static const NameTable<GrowthTest> table{
      "growth test", "--growth-test", {{GrowthTest::Branch, "branch"}, {GrowthTest::None, "none"}}};
  return table;
}

int64_t default_growth_holdout(int64_t training_samples) {
  return std::min(std::clamp<int64_t>(training_samples / 50, 256, 2048), training_samples / 4);
}

int64_t growth_check_wait(int64_t rejected_in_a_row) {
  return kGrowthCheckEvery << std::min(rejected_in_a_row, kMostCooldownDoublings);
}

int64_t updates_to_next_check(const BatchGrowthState& state, int64_t step) {
  return growth_check_wait(state.rejected_in_a_row) - (step - state.last_check_step);
}

int64_t branch_test_samples(int64_t batch, int64_t rest_of_epoch) {
  const int64_t updates = std::min(kBranchTestUpdates, rest_of_epoch / (2 * batch));
  return updates >= kFewestBranchTestUpdates ? updates * 2 * batch : 0;
}

int64_t branch_test_worst_cost(GrowthControl control, int64_t test_samples) {
  return (control == GrowthControl::Temperature ? 2 : 1) * test_samples;
}

int64_t thrown_away_samples(const std::vector<BatchTest>& tests) {
  int64_t samples = 0;
  for (const BatchTest& test : tests)
    samples += (test.branches - 1) * test.proposal.test_samples;
  return samples;
}

namespace {
// A least sample count, rounded up to whole samples; past anything a run reaches (a budget or a
// gain too small, infinity): never, as the largest count.
int64_t whole_samples_or_never(double samples) {
  const double whole = std::ceil(samples - 1e-9);
  return whole < 4e18 ? int64_t(whole) : std::numeric_limits<int64_t>::max();
}
}  // namespace

int64_t test_budget_allows_from(double budget, int64_t thrown, int64_t worst_cost,
                                int64_t test_samples) {
  BB_INTERNAL_ASSERT(budget > 0, "a test budget is a positive fraction");
  // thrown + cost <= budget (seen + test_samples).
  const int64_t least_trained = whole_samples_or_never(double(thrown + worst_cost) / budget);
  if (least_trained == std::numeric_limits<int64_t>::max())
    return least_trained;
  return std::max<int64_t>(0, least_trained - test_samples);
}

int64_t samples_to_repay_test(double gain, int64_t worst_cost) {
  // after x (1 - 1/gain) >= worst_cost.
  return whole_samples_or_never(gain > 1 ? double(worst_cost) * gain / (gain - 1)
                                         : std::numeric_limits<double>::infinity());
}

BranchVerdict judge_branches(const BranchLosses& losses, double tolerance, double confidence) {
  BB_INTERNAL_ASSERT(
      losses.current.size() == losses.doubled.size() && !losses.current.empty() && losses.items > 0,
      "branch losses must pair the same samples");
  const double items = double(losses.items);
  const size_t n = losses.current.size();
  double current = 0;
  double doubled = 0;
  for (size_t i = 0; i < n; ++i) {
    current += losses.current[i];
    doubled += losses.doubled[i];
  }
  BranchVerdict verdict;
  verdict.current_loss = current / items;
  verdict.doubled_loss = doubled / items;
  verdict.difference = (doubled - current) / items;
  // The per-item difference is a sum over samples of their differences, over the items: its
  // variance is n times a sample difference's, over the items squared.
  if (n > 1) {
    const double mean = (doubled - current) / double(n);
    double squares = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = losses.doubled[i] - losses.current[i] - mean;
      squares += d * d;
    }
    verdict.standard_error = std::sqrt(double(n) * squares / double(n - 1)) / items;
  }
  verdict.start_loss = losses.start_loss;
  verdict.bound = tolerance * std::max(0.0, losses.start_loss - verdict.current_loss);
  verdict.keep = std::isfinite(verdict.doubled_loss) &&
                 verdict.difference + confidence * verdict.standard_error <= verdict.bound;
  return verdict;
}

std::string replay_schedule(int64_t start_batch, const std::vector<BatchDecision>& decisions) {
  std::string text = "0:" + std::to_string(start_batch);
  for (const BatchDecision& d : decisions)
    text += " " + std::to_string(d.samples_seen) + "s:" + std::to_string(d.to_batch);
  return text;
}

}  // namespace bigbatch
