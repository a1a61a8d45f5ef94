#pragma once
// What --global-batch auto has measured and decided so far (schedule/batch_growth.h): saved in
// every checkpoint with the rest of TrainingProgress, so a resumed run continues the same
// decisions, and its decision log replays as an ordinary --global-batch-schedule. Each doubling
// is first tested by training both batches on the same samples (--growth-test branch).
#include <cstdint>
#include <optional>
#include <vector>

namespace bigbatch {

// One doubling of the global batch, with the measurements it was decided from.
struct BatchDecision {
  int64_t step = 0;          // updates done when it was decided; the next one is at `to_batch`
  int64_t samples_seen = 0;  // where the new batch starts (a --global-batch-schedule threshold)
  int64_t from_batch = 0;
  int64_t to_batch = 0;
  // The noise scale's estimate and its two-standard-error band at the decision, in samples
  // (a language model's tokens over its mean tokens per sample).
  double noise_low = 0;
  double noise_scale = 0;
  double noise_high = 0;
  double update_cost = 0;  // an update's fixed cost, in samples' worth of compute
  // goodput(to) / goodput(from), predicted at the band's low end or at the estimate
  // (--growth-predict-at)
  double goodput_gain = 0;
  // The samples each branch of its test trained (0: taken without a branch test).
  int64_t test_samples = 0;
};

// One branch test of a proposed doubling: from the same point, `proposal.test_samples` samples
// trained at the current batch and the same samples at the doubled one, the controller's slice
// of the training set scored (per item, the same samples) at the start and after each.
struct BatchTest {
  BatchDecision proposal;  // where both branches started and what was tested
  double start_loss = 0;   // per item, where both began
  double current_loss = 0;
  double doubled_loss = 0;
  // The doubled branch's loss minus the current one's, its standard error over the paired
  // samples, and the most it may be for the doubling to be kept.
  double difference = 0;
  double standard_error = 0;
  double bound = 0;
  double confidence = 0;  // the standard errors the difference had to clear the bound by
  // The rate the compared branch trained at over the current batch's own: 1 (the current batch
  // as the run goes on), or the doubled batch's noise temperature (--growth-control
  // temperature); current_loss is that branch's.
  double control_rate_factor = 1;
  // The branches trained: 2, or 3 when a rejected test under a control trained the current
  // batch again at its own rate. All but the kept one are thrown away.
  int64_t branches = 2;
  bool kept = false;
  // What the test took besides the kept branch's training: the losing branch, putting the run
  // back and scoring both (the run's train_seconds count it).
  double extra_seconds = 0;
};

// The timings an update's cost is fitted from: micro-steps (paid per sample) against the rest
// of the update (gradient finish, all-reduce, optimizer: paid once per update).
struct UpdateCostTally {
  int64_t updates = 0;
  int64_t samples = 0;
  double gradient_seconds = 0;
  double update_seconds = 0;
};

struct BatchGrowthState {
  UpdateCostTally tally;
  // The update's fixed cost in samples' compute once measured (or given by --update-cost);
  // negative until then. Fixed once known, so every later decision follows from the
  // checkpointed state alone.
  double update_cost = -1;
  int64_t last_check_step = 0;           // the update at which the batch was last checked
  double last_gain = 0;                  // that check's predicted goodput gain (0: none yet)
  std::vector<BatchDecision> decisions;  // oldest first
  // A doubling that waits for its branch test, which the next update boundary runs; its
  // test_samples say how long each branch trains. A checkpoint may hold it (a stop before the
  // test), so a resumed run tests at the same point.
  std::optional<BatchDecision> proposal;
  std::vector<BatchTest> tests;  // oldest first
  // Tests rejected since the last doubling: each doubles the wait before the next check.
  int64_t rejected_in_a_row = 0;
};

}  // namespace bigbatch
