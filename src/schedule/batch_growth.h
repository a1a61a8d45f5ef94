#pragma once
// --global-batch auto's arithmetic: when doubling the global batch pays, from the gradient
// noise scale and the measured cost of an update (McCandlish et al. 2018, eq. 2.11 and
// appendix D; Pollux's goodput, Qiao et al. OSDI 2021). Torch-free and clock-free: the run
// schedule (schedule/run_schedule.h, AutoBatchSchedule) feeds it the timings and the noise, and
// every decision follows from BatchGrowthState (checkpointed) and the noise scale's averages.
//
// With B_noise the noise scale, reaching a loss takes E = E_min (1 + B / B_noise) samples, so
// training progresses per sample in proportion to 1 / (1 + B / B_noise). An update of B samples
// costs beta B + gamma seconds (micro-steps per sample; the finish, all-reduce and optimizer once
// per update); with r = gamma / beta, the update's cost in samples of compute, the goodput —
// progress per second — is
//   G(B) ~ B / ((1 + B / B_noise) (r + B)),
// largest at B* = sqrt(r B_noise) (McCandlish's appendix D). Doubling pays when
// G(2B) / G(B) >= 1 + threshold, evaluated at the low end of the noise scale's two-standard-error
// band (a noisy estimate waits instead of growing), or at the estimate itself when the branch
// test is to decide (--growth-predict-at). One process accumulating on one device pays
// little per update (r small), so it grows only while B is far below B_noise's square root
// scale; ranks whose all-reduce is slow grow further.
//
//   GrowthRule rule{/*max_global_batch=*/4096, /*threshold=*/0.05};
//   BatchCheck check = judge_growth(rule, 256, noise_summary, /*update_cost=*/40);
//   if (check.grow) ...  // check.proposed == 512
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/name_table.h"
#include "state/batch_growth_state.h"
#include "stats/gradient_noise.h"

namespace bigbatch {

// --growth-test: how a proposed doubling is confirmed.
enum class GrowthTest { Branch, None };
const NameTable<GrowthTest>& growth_test_names();

// --growth-control: what the branch test compares the doubled branch with. Rate: the current
// batch at its own rate, the run as it would go on. Temperature: the current batch at the
// doubled branch's noise temperature (rate over batch) — its rate times the doubling's rate
// factor over 2 (1/sqrt(2) under the square-root rule, 1 under the linear one) — which trains
// the same SGD time (rate x updates) over the same samples; the comparison then measures the
// batch alone, not a lower temperature's quick early gain. When the doubling is rejected, the
// current batch is trained again at its own rate (the run as it goes on), so the test costs a
// third branch then.
enum class GrowthControl { Rate, Temperature };
const NameTable<GrowthControl>& growth_control_names();

// --growth-predict-at: where in the noise scale's band a doubling's goodput is predicted. Low:
// at the band's two-standard-error low end, so a noisy estimate waits (the prediction alone is
// trusted only when the whole band favours it). Estimate: at the estimate itself, so a doubling
// is proposed as soon as the estimate favours it and the branch test, not the band, decides.
enum class GrowthPrediction { BandLow, Estimate };
const NameTable<GrowthPrediction>& growth_prediction_names();

// A branch test's branches: the current batch (the run without the doubling), the doubled
// batch (with the doubling), and the control the doubled one is compared with under
// GrowthControl::Temperature.
enum class TestBranch { Current, Doubled, Control };

// --growth-holdout's default under --growth-test branch: 2% of the training set, at least 256
// and at most 2048 samples, and never more than a quarter of it.
int64_t default_growth_holdout(int64_t training_samples);

// --global-batch auto's limits, as resolved against the data.
struct GrowthRule {
  int64_t max_global_batch = 0;
  double threshold = 0.05;  // the least predicted goodput gain that is worth a doubling
  GrowthPrediction predict_at = GrowthPrediction::BandLow;
  // --update-cost: an update's fixed cost in samples of compute, given (none: measured).
  std::optional<double> update_cost;
  int64_t dataset_size = 0;  // a batch never grows past the training set
  bool must_divide = false;  // --strict-batch: only batches that divide the training set
  // --growth-test branch: a doubling the prediction favours is only proposed, and taken if
  // training the same samples at both batches shows the doubled batch's loss keeping up
  // (train/branch_trial.h); none: the prediction alone decides.
  bool branch_test = true;
  GrowthControl control = GrowthControl::Rate;
  // --growth-test-budget: the losing branches' samples never exceed this fraction of the
  // samples trained (see test_budget_allows_from).
  double test_budget = 0.05;
  // The training samples set aside for the tests (--growth-holdout): a replay sets the same
  // ones aside, so that it trains on the same samples.
  int64_t holdout = 0;
};

// The run's first updates pay for allocation and warm-up: their timings are not the update's
// cost. The cost is then the mean over the next kCostCalibrationUpdates whole windows.
inline constexpr int64_t kCostWarmupUpdates = 2;
inline constexpr int64_t kCostCalibrationUpdates = 16;
// Updates between two checks of the batch (and after a doubling before the next check); each
// branch test rejected in a row doubles the wait, up to 2^kMostCooldownDoublings times.
inline constexpr int64_t kGrowthCheckEvery = 20;
inline constexpr int64_t kMostCooldownDoublings = 5;
// A branch test trains up to this many updates of the doubled batch (twice as many of the
// current), at least kFewestBranchTestUpdates.
inline constexpr int64_t kBranchTestUpdates = 8;
inline constexpr int64_t kFewestBranchTestUpdates = 2;

// One update's timings, for the cost.
struct UpdateTiming {
  int64_t samples = 0;
  double gradient_seconds = 0;  // the micro-steps
  // The rest of the update: finishing the gradients (all-reduce included), applying them, and
  // the loop's own work for it (the window, its record and display).
  double update_seconds = 0;
  // false when the update is not a fair sample of the cost: a resumed window's first
  // micro-steps ran in an earlier process, or the update also evaluated.
  bool whole_window = true;
};

// Adds an update (the run's `step`-th) to the tally until the cost is known, then fixes
// state.update_cost. Returns whether the cost became known with this update.
bool tally_update_cost(BatchGrowthState& state, int64_t step, const UpdateTiming& timing);

// G(2B) / G(B) for the goodput model above.
double goodput_gain(double batch, double noise_scale, double update_cost);
// The batch with the largest goodput: sqrt(update_cost x noise_scale).
double goodput_optimal_batch(double noise_scale, double update_cost);

// A check of the batch: the proposal (double it) and what is predicted of it.
struct BatchCheck {
  int64_t step = 0;
  int64_t samples_seen = 0;
  int64_t batch = 0;
  int64_t proposed = 0;
  NoiseScaleSummary noise;
  double update_cost = 0;
  GrowthPrediction predicted_at = GrowthPrediction::BandLow;
  double goodput_gain = 0;    // predicted at the band's low end or the estimate (predicted_at)
  double updates_factor = 0;  // S(2B) / S(B) at the estimate: the updates a loss takes
  double samples_factor = 0;  // E(2B) / E(B) at the estimate: the samples it takes
  bool grow = false;          // doubled at once (--growth-test none)
  int64_t test_samples = 0;   // proposed: each branch of its test trains this many samples
  std::string reason;         // why the batch stays, when it does
};

// Whether `batch` should double now.
BatchCheck judge_growth(const GrowthRule& rule, int64_t batch, const NoiseScaleSummary& noise,
                        double update_cost);

// The updates to wait after a check before the next, with `rejected_in_a_row` tests rejected.
int64_t growth_check_wait(int64_t rejected_in_a_row);
// The updates still to wait after update `step` before the next check is due (0 or less: due).
int64_t updates_to_next_check(const BatchGrowthState& state, int64_t step);

// The samples each branch of a test of doubling `batch` trains: kBranchTestUpdates updates of
// the doubled batch, or as many as the epoch's `rest_of_epoch` samples hold (both branches end
// inside the epoch); 0 when fewer than kFewestBranchTestUpdates fit (the test waits).
int64_t branch_test_samples(int64_t batch, int64_t rest_of_epoch);

// The samples a test of `test_samples` per branch throws away when it is lost in full: one
// branch's, or two under GrowthControl::Temperature (a rejected doubling trains the current batch
// a third time).
int64_t branch_test_worst_cost(GrowthControl control, int64_t test_samples);
// The samples the tests in the log trained besides their kept branches.
int64_t thrown_away_samples(const std::vector<BatchTest>& tests);
// The samples seen from which a test may start without the tests' losing branches ever exceeding
// `budget` of the samples trained: `thrown` so far plus the test's worst cost within budget x
// (samples seen + the test's kept branch). The bound holds at every point of the run, so the
// samples to any loss are at most (1 + budget) times the samples the kept run trained. A test's
// cost is in proportion to the batch (16 updates of the current one), so a small budget also
// keeps a run from testing early: at 32, 512 samples wait for 9,728 trained at 5%.
int64_t test_budget_allows_from(double budget, int64_t thrown, int64_t worst_cost,
                                int64_t test_samples);

// The samples a run must still train after a test's kept branch for the doubling, kept, to repay
// the test lost in full: at `gain` times the goodput (predicted as GrowthRule::predict_at says) the
// rest of the run makes its progress for 1/gain of the compute, saving 1 - 1/gain of it, and a lost
// test threw away `worst_cost` samples of the current batch's compute. So a test is worth proposing
// only while the run has worst_cost x gain / (gain - 1) samples left after it: at 1.5x, 3 times
// the test; at 1.05x, 21 times. A test near the run's end — where a cosine's rate is near 0 and
// both branches barely move — cannot pay for itself and is not run. A gain of at most 1: never.
int64_t samples_to_repay_test(double gain, int64_t worst_cost);

// Both branches' losses on the controller's slice: per sample, summed over its items (one item
// per sample, or a language model's target tokens), the same samples in the same order; and the
// slice's loss per item where both began.
struct BranchLosses {
  std::vector<double> current;
  std::vector<double> doubled;
  int64_t items = 0;  // the slice's items
  double start_loss = 0;
};

// The doubled branch is kept when it made at least 1 - `tolerance` of the current branch's
// progress over the same samples: its loss per item at most the current one's plus `tolerance`
// times what the current branch gained (start_loss - current_loss; none gained: a bound of 0).
// Growing costs samples exactly where a doubled batch makes less progress per sample, so a
// tolerance of 0.1 keeps the doublings that cost at most ~10% more samples. The standard error
// of the difference comes from the paired per-sample differences (the slice is a sample of the
// data): with `confidence` z, the doubled branch is kept only when the difference plus z standard
// errors is within the bound (0: the estimate alone decides).
struct BranchVerdict {
  double start_loss = 0;
  double current_loss = 0;
  double doubled_loss = 0;
  double difference = 0;
  double standard_error = 0;
  double bound = 0;
  bool keep = false;
};
BranchVerdict judge_branches(const BranchLosses& losses, double tolerance, double confidence = 0);

// The decision log as the --global-batch-schedule that replays it: "0:64 12800s:128".
std::string replay_schedule(int64_t start_batch, const std::vector<BatchDecision>& decisions);

}  // namespace bigbatch
