#pragma once
// The run's batch regime as one object: the plan of the next update, its learning rate, whether
// the run is complete and how long it is expected to take, the same plan cut into smaller
// micro-batches (the out-of-memory back-off), and the plan a checkpoint's position resumes under.
// One implementation per regime:
//   FixedSchedule     one global batch; the rate is the LR schedule's at the update's index
//   RampSchedule      --global-batch-schedule: the global batch steps up at thresholds in samples
//                     or epochs; the rate follows samples seen / reference batch, scaled to the
//                     batch (schedule/batch_schedule.h)
//   AdaScaleSchedule  one global batch; the rate is the reference batch's times a gain measured
//                     from the gradients, and the run ends at a count of scale-invariant updates
//                     (schedule/adascale.h)
//   AutoBatchSchedule --global-batch auto: a ramp whose steps it decides while the run goes,
//                     doubling the batch when the noise scale and the update's measured cost
//                     say it pays (schedule/batch_growth.h); its decision log is the ramp that
//                     replays it
// The fit loop asks and never tests which regime it runs: a regime that chooses its batch while
// the run goes is one more implementation. Its position is the run's TrainingProgress (what a
// checkpoint saves), so a schedule holds no counter of its own, only the plan in force.
//
//   std::unique_ptr<RunSchedule> schedule = make_run_schedule(resolved);  // config/resolved_run.h
//   if (const auto change = schedule->plan_update(at))   // a ramp's switch, before the window
//     announce(*change);
//   UpdateRate rate = schedule->rate(at, {items, &noise});  // once the gradients are final
//   schedule->count(at, rate, applied);
//   if (auto check = schedule->observe(at, {timing, &noise}))  // after the update is counted
//     report(*check);
//   if (auto proposal = schedule->proposal(at))  // at the next boundary: test it by branching
//     { schedule->enter_branch(at, doubled); ...; schedule->settle(kept_at, test); }
//   while (!schedule->complete(at)) ...
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "batching/batch_plan.h"
#include "schedule/batch_growth.h"
#include "schedule/batch_schedule.h"
#include "schedule/lr_schedule.h"
#include "state/training_progress.h"
#include "stats/gradient_noise.h"

namespace bigbatch {

// The rate an update trains at.
struct UpdateRate {
  double lr = 0;
  double gain = 1;  // AdaScale's gain in the rate (1 under the other regimes)
  // --adam-sqrt-adjust: AdamW's betas and eps at the update's batch (unset: as configured).
  std::optional<AdamHyperparameters> adam = std::nullopt;
};

// What the update's own gradients tell a regime that measures them: its item count (the batch its
// mean is over) and the noise-scale averages that already include it.
struct GradientMeasure {
  int64_t items = 0;
  const NoiseScaleTracker* noise = nullptr;
};

// What the fit loop tells a regime once an update is counted: where its time went, and the
// noise scale's averages that include it.
struct UpdateObservation {
  UpdateTiming timing;
  const NoiseScaleTracker* noise = nullptr;
  // Over several ranks: rank 0's value of a measurement each rank takes for itself (a timing),
  // so that every rank decides alike; called on every rank at the same update. None in one
  // process.
  std::function<double(double)> first_rank_value;
};

// A switch of global batch at an update boundary: from what, to which plan, at which rate.
struct BatchChange {
  int64_t from_global_batch = 0;
  BatchPlan plan;
  double lr = 0;
  // lr's factors, so that a rate that falls as the batch grows reads as the schedule's decay
  // times the rule's rise: "0.1092 (the schedule at batch 64) x 0.7071 (sqrt rule, 32 / 64)".
  std::string rate_factors = {};
  std::optional<AdamHyperparameters> adam = std::nullopt;  // --adam-sqrt-adjust: the new batch's
};

// The updates and epochs a run is expected to take, as the progress display counts them down.
struct RunLength {
  int64_t updates_per_epoch = 0;
  int64_t total_updates = 0;
  int64_t epochs = 0;
};

// The run's length as resolved: epochs started and updates in all (for AdaScale and a ramp, as
// resolve_run simulated them).
struct RunBounds {
  int64_t epochs = 0;
  int64_t total_updates = 0;
};

class RunSchedule {
 public:
  // `epoch` is `plan`'s arithmetic over the training data (its size, last-window policy and
  // items per sample are what every later plan is cut with).
  RunSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds);
  virtual ~RunSchedule() = default;
  RunSchedule(const RunSchedule&) = delete;
  RunSchedule& operator=(const RunSchedule&) = delete;

  // The plan in force: the next update's once plan_update has run for it.
  const BatchPlan& plan() const { return plan_; }
  const EpochPlan& epoch() const { return epoch_; }
  const LrSchedule& lr_schedule() const { return lr_; }
  const RunBounds& bounds() const { return bounds_; }

  // The global batch of the update that starts at `at` (without switching to it).
  virtual int64_t global_batch_at(const TrainingProgress& at) const;
  // Switches to the plan of the update that starts at `at`; the change when there is one.
  virtual std::optional<BatchChange> plan_update(const TrainingProgress& at);
  // The rate of the update whose gradients are final.
  virtual UpdateRate rate(const TrainingProgress& at, const GradientMeasure& measured) const = 0;
  // Advances the regime's own position in `at` by an update trained at `rate` (AdaScale's
  // scale-invariant count); nothing for the others.
  virtual void count(TrainingProgress& at, const UpdateRate& rate, bool applied) const;
  // After the update is counted: a regime that decides its batch as the run goes records what
  // it measured in `at` (so a checkpoint keeps it) and returns its check of the batch when it
  // made one; a doubling it decides is the next plan_update's change. None for the others.
  virtual std::optional<BatchCheck> observe(TrainingProgress& at, const UpdateObservation& seen);
  // A regime that tests what it proposes by branching: the proposal waiting in `at` for its
  // test, which the fit loop runs at the next update boundary (none for the others).
  virtual std::optional<BatchDecision> proposal(const TrainingProgress& at) const;
  // Enters a branch of that test from its starting point `at`: the doubled batch (from the next
  // update), the current one, or the current one at the control's rate (until restore or
  // settle). Either way `at` no longer holds the proposal. Returns the branch's rate over the
  // schedule's own: 1 but for a control whose temperature differs.
  virtual double enter_branch(TrainingProgress& at, TestBranch branch);
  // The test decided and `at` is the kept branch's: records the test, takes up its plan.
  virtual void settle(TrainingProgress& at, const BatchTest& test);
  // Whether no update is left: the epochs, the updates, or a regime's own length.
  virtual bool complete(const TrainingProgress& at) const;
  virtual RunLength expected_length(const TrainingProgress& at) const;
  // The fraction of the current epoch done after the update just counted: by updates under one
  // global batch, by position when the batch changes inside epochs.
  virtual double epoch_progress(const TrainingProgress& at) const;
  // Whether updates carry a measured gain (records and the display show it).
  virtual bool measures_gain() const { return false; }
  // A line for the run's end ("AdaScale: 412 updates for ..."), or empty.
  virtual std::string summary(const TrainingProgress& at) const;
  // A few words on a regime's own state after the update at `at`, for the status line
  // ("auto: check in 12"), or empty.
  virtual std::string status(const TrainingProgress& at) const;

  // The same global batch cut into micro-batches of `micro` (the out-of-memory back-off).
  void set_micro_batch(int64_t micro);
  // --micro-batch-tokens (token rows; 0: off): each window cut into micro-batches of at most
  // this many padded tokens instead of the plan's micro-batch. Set at start-up, halved by the
  // back-off.
  int64_t micro_batch_tokens() const { return micro_batch_tokens_; }
  void set_micro_batch_tokens(int64_t budget) { micro_batch_tokens_ = budget; }
  // Takes up a checkpoint's position: the plan of its last update. Returns whether the plan
  // changed (BatchNorm's momentum follows the accumulation steps).
  virtual bool restore(const TrainingProgress& at);
  // What is inconsistent in a checkpoint's counters under this regime (empty: nothing), e.g.
  // an epoch position that no window of the global batch ends at.
  virtual std::string inconsistency(const TrainingProgress& at) const;

 protected:
  void replan(BatchPlan plan);
  // The counters' consistency under one global batch; `count_updates`: also the updates per epoch.
  std::string fixed_batch_inconsistency(const TrainingProgress& at, bool count_updates) const;

  BatchPlan plan_;
  EpochPlan epoch_;
  LrSchedule lr_;
  RunBounds bounds_;
  int64_t micro_batch_tokens_ = 0;
};

class FixedSchedule final : public RunSchedule {
 public:
  using RunSchedule::RunSchedule;
  UpdateRate rate(const TrainingProgress& at, const GradientMeasure& measured) const override;
  std::string inconsistency(const TrainingProgress& at) const override;
};

// `lr` counts reference-batch updates: samples seen / reference_batch.
class RampSchedule : public RunSchedule {
 public:
  RampSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds,
               GlobalBatchSchedule batches, int64_t reference_batch);
  int64_t global_batch_at(const TrainingProgress& at) const override;
  std::optional<BatchChange> plan_update(const TrainingProgress& at) override;
  UpdateRate rate(const TrainingProgress& at, const GradientMeasure& measured) const override;
  RunLength expected_length(const TrainingProgress& at) const override;
  double epoch_progress(const TrainingProgress& at) const override;
  bool restore(const TrainingProgress& at) override;
  std::string inconsistency(const TrainingProgress& at) const override;

 protected:
  // The rate of an update at `global_batch` that starts after `samples_seen` samples.
  double lr_at(int64_t samples_seen, int64_t global_batch) const;
  // lr_at's two factors in words (BatchChange::rate_factors).
  std::string rate_factors(int64_t samples_seen, int64_t global_batch) const;
  // What the rate is multiplied by when the batch goes from `global_batch` to twice it.
  double doubling_rate_factor(int64_t global_batch) const;
  BatchPlan plan_for(int64_t global_batch) const;

  GlobalBatchSchedule batches_;
  int64_t reference_batch_;
};

// A ramp that starts at one step and adds a doubling whenever judge_growth says it pays; its
// steps are always replay_schedule(start, decisions), so the same run under that
// --global-batch-schedule takes the same batches at the same rates. The measurements and the
// decisions live in TrainingProgress::growth (a checkpoint's); the regime holds only its rule.
class AutoBatchSchedule final : public RampSchedule {
 public:
  AutoBatchSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds,
                    int64_t reference_batch, GrowthRule rule);
  std::optional<BatchCheck> observe(TrainingProgress& at, const UpdateObservation& seen) override;
  std::optional<BatchDecision> proposal(const TrainingProgress& at) const override;
  double enter_branch(TrainingProgress& at, TestBranch branch) override;
  void settle(TrainingProgress& at, const BatchTest& test) override;
  UpdateRate rate(const TrainingProgress& at, const GradientMeasure& measured) const override;
  RunLength expected_length(const TrainingProgress& at) const override;
  std::string summary(const TrainingProgress& at) const override;
  std::string status(const TrainingProgress& at) const override;
  bool restore(const TrainingProgress& at) override;
  std::string inconsistency(const TrainingProgress& at) const override;
  const GrowthRule& rule() const { return rule_; }

 private:
  // The control branch's rate over the current batch's: the doubled batch's noise temperature.
  double control_rate_factor() const;
  // The samples the run has left at the batch in force: its epochs' or its updates' end,
  // whichever comes first (a batch that still grows trains more per update).
  int64_t samples_left(const TrainingProgress& at) const;

  int64_t start_batch_;
  GrowthRule rule_;
  // 1, or the control's factor while a branch test trains its control branch.
  double branch_rate_factor_ = 1;
};

// `lr` counts scale-invariant updates at the reference batch; the run ends when they reach
// `scale_invariant_total` (or the bounds, a gain of 1 throughout).
class AdaScaleSchedule final : public RunSchedule {
 public:
  AdaScaleSchedule(BatchPlan plan, EpochPlan epoch, LrSchedule lr, RunBounds bounds,
                   int64_t reference_batch, int64_t scale_invariant_total);
  UpdateRate rate(const TrainingProgress& at, const GradientMeasure& measured) const override;
  void count(TrainingProgress& at, const UpdateRate& rate, bool applied) const override;
  bool complete(const TrainingProgress& at) const override;
  RunLength expected_length(const TrainingProgress& at) const override;
  bool measures_gain() const override { return true; }
  std::string summary(const TrainingProgress& at) const override;
  std::string inconsistency(const TrainingProgress& at) const override;

 private:
  int64_t reference_batch_;
  int64_t scale_invariant_total_;
};

// A ramp step's plan: `global_batch` cut into micro-batches of `micro` over `world` ranks
// (accumulation derived). Errors name the --global-batch-schedule step.
BatchPlan plan_for_ramp_step(int64_t global_batch, int64_t micro, int64_t world);

}  // namespace bigbatch
