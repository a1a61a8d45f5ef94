#pragma once
// The gradient noise scale and the critical batch (McCandlish et al. 2018, "An Empirical Model
// of Large-Batch Training"; formulas in ../shared/LARGE_BATCH.md, section 3).
//
// Accumulation gives two batch sizes for free in every update: the first micro-step's gradient
// (B_small, read before the second micro-step adds to it) and the update's mean gradient
// (B_big = the global batch); with data parallelism the ranks' small batches are pooled (mean
// squared norm, harmonic-mean size; dist/gradient_reducer.h). From their squared norms, appendix
// A.2's unbiased estimators give |G|^2 (the true gradient's squared norm) and tr(Sigma) (the
// per-example gradient variance); each is smoothed by its own bias-corrected EMA, and their ratio
// is the simple noise scale
//   B_simple = tr(Sigma) / |G|^2,
// an estimate of the critical batch: below it, doubling the batch halves the updates needed;
// far above it, a larger batch only costs samples. With B_noise fixed, reaching a loss takes
//   S = S_min (1 + B_noise / B) updates and E = E_min (1 + B / B_noise) samples   (eq. 2.11).
//
//   NoiseScaleTracker tracker;
//   tracker.add(NoiseSample{/*small_batch=*/32, /*small_sq_norm=*/4.1, /*big_batch=*/256,
//                           /*big_sq_norm=*/0.9});
//   std::optional<double> b_noise = tracker.noise_scale();
#include <cstdint>
#include <optional>
#include <string>

#include "core/name_table.h"

namespace bigbatch {

// What the noise scale's norms are of: the raw gradient, or the gradient times the optimizer's
// diagonal preconditioner (AdamW's and LAMB's 1 / (sqrt(v) + eps): the noise of the update's
// direction, as Pollux measures it). Both are the same estimators of a linear image of the
// gradient, so the formulas below hold for either. Auto: preconditioned for an optimizer that
// has a preconditioner.
enum class NoiseGradient { Auto, Raw, Preconditioned };
const NameTable<NoiseGradient>& noise_gradient_names();

// Squared norms of mean gradients over two nested batches of one update.
struct NoiseSample {
  double small_batch = 0;
  double small_sq_norm = 0;
  double big_batch = 0;
  double big_sq_norm = 0;
};

struct NoiseEstimate {
  double gradient_sq = 0;  // unbiased |G|^2
  double trace = 0;        // unbiased tr(Sigma)
};

// Appendix A.2; needs big_batch > small_batch > 0.
NoiseEstimate estimate_noise(const NoiseSample& sample);

// The EMA state, saved in checkpoints so a resumed run continues the same estimate.
struct NoiseScaleState {
  double gradient_sq_ema = 0;
  double trace_ema = 0;
  double weight = 0;  // 1 - beta^n: the bias correction
  int64_t samples = 0;
  // The spread of the per-update estimates, for the average's standard error: EMAs of their
  // squares and product, and the sum of the squared EMA weights (n_eff = weight^2 / weight_sq).
  double gradient_sq_sq_ema = 0;
  double trace_sq_ema = 0;
  double product_ema = 0;
  double weight_sq = 0;
  // Plain sums over every measured update of the run: its average noise scale.
  double gradient_sq_sum = 0;
  double trace_sum = 0;
  // The samples that entered the spread (fewer than `samples` after a resume from a
  // checkpoint that did not keep it: the spread is then unknown for the rest of the run).
  int64_t spread_samples = 0;
  // The global batch at which beta's memory is counted: the first measured update's. An
  // update at batch B decays the averages by beta^(B / memory_batch), so the memory spans the
  // same samples (1 / (1 - beta) updates of memory_batch) as the batch grows. 0: not yet set
  // (or a checkpoint from before: set by the next update).
  double memory_batch = 0;
  // Whether the norms are of the preconditioned gradient (EngineOptions::precondition_noise).
  bool preconditioned = false;
};

// The estimate as reported: its value, how sure it is, and the run's average.
struct NoiseScaleSummary {
  double value = 0;  // tr(Sigma) / |G|^2 from the averages over ~100 updates
  // Two standard errors either way (delta method on the ratio of the two averages); high is
  // infinite when |G|^2 is within two standard errors of zero; both 0 when the spread is not
  // known.
  double low = 0;
  double high = 0;
  double run_average = 0;  // sum tr(Sigma) / sum |G|^2 over the run (0: not positive)
  int64_t updates = 0;
};

class NoiseScaleTracker {
 public:
  // beta 0.99 as in the reference implementations (gpt-neox, Composer): ~100 updates of memory
  // at the first measured batch, the same samples' worth at any later one.
  explicit NoiseScaleTracker(double beta = 0.99) : beta_(beta) {}

  // One update's measurement; `update_batch` is that update's global batch in samples (0:
  // count the update as one of memory_batch, as a fixed batch's always is).
  void add(const NoiseSample& sample, double update_batch = 0);

  // tr(Sigma) / |G|^2 from the bias-corrected averages; none until the averaged |G|^2 is
  // positive (early, noisy estimates can make it negative).
  std::optional<double> noise_scale() const;
  double gradient_sq() const;
  double trace() const;
  // noise_scale() with its uncertainty and the run's average; none when noise_scale() is.
  std::optional<NoiseScaleSummary> summary() const;

  const NoiseScaleState& state() const { return state_; }
  void restore(const NoiseScaleState& state) { state_ = state; }

 private:
  double beta_;
  NoiseScaleState state_;
};

// Updates and samples to reach a loss at batch B relative to their minima (eq. 2.11).
struct BatchTradeoff {
  double steps_factor = 0;    // S / S_min = 1 + B_noise / B
  double samples_factor = 0;  // E / E_min = 1 + B / B_noise
};
BatchTradeoff batch_tradeoff(double batch, double noise_scale);

// One sentence for the end of a run: whether `batch` is well below, near or far above the
// measured critical batch, and what that costs in updates and in samples. `unit` is what both
// count: "samples", or "tokens" for a language model (whose mean, and so whose noise scale, is
// over tokens: McCandlish et al. count tokens too). It says how many updates the estimate
// rests on, its range within two standard errors and the run's average; under
// kNoiseScaleSettledUpdates the EMA has not settled, and when the two ends of the range give
// different verdicts (below / near / far above) the estimate is too noisy to judge the batch:
// the sentence then says so instead of judging.
inline constexpr int64_t kNoiseScaleSettledUpdates = 20;
std::string critical_batch_verdict(double batch, const NoiseScaleSummary& noise,
                                   const std::string& unit = "samples");
// The same from a bare value (no spread known, no run average): for tests and old records.
std::string critical_batch_verdict(double batch, double noise_scale, int64_t updates,
                                   const std::string& unit = "samples");

}  // namespace bigbatch
