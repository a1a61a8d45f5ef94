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

namespace bigbatch {

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
};

class NoiseScaleTracker {
 public:
  // beta 0.99 as in the reference implementations (gpt-neox, Composer): ~100 updates of memory.
  explicit NoiseScaleTracker(double beta = 0.99) : beta_(beta) {}

  void add(const NoiseSample& sample);

  // tr(Sigma) / |G|^2 from the bias-corrected averages; none until the averaged |G|^2 is
  // positive (early, noisy estimates can make it negative).
  std::optional<double> noise_scale() const;
  double gradient_sq() const;
  double trace() const;

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
// over tokens: McCandlish et al. count tokens too). `updates` is how many the estimate rests
// on: under kNoiseScaleSettledUpdates the EMA has not settled, and the sentence says so
// instead of judging.
inline constexpr int64_t kNoiseScaleSettledUpdates = 20;
std::string critical_batch_verdict(double batch, double noise_scale, int64_t updates,
                                   const std::string& unit = "samples");

}  // namespace bigbatch
