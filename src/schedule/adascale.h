#pragma once
// AdaScale SGD (Johnson, Agrawal, Gu, Guestrin 2020; ../shared/LARGE_BATCH.md, section 4): the
// learning rate tuned at a reference batch B_ref, multiplied in each update by a gain measured
// from the gradients themselves, instead of by a fixed rule.
//
// With the batch S = B / B_ref times the reference, per-reference-batch gradient variance
// sigma^2 = tr(Sigma) / B_ref and the true gradient's squared norm mu^2 = |G|^2,
//   r = (sigma^2 + mu^2) / (sigma^2 / S + mu^2)            in [1, S]
// — 1 where the gradient is exact (a bigger batch adds nothing), S where it is all noise (the
// linear rule). In noise-scale terms, r = (1 + B_noise / B_ref) / (1 + B_noise / B), so the
// gain comes from the same two averages as the gradient noise scale (stats/gradient_noise.h):
// no extra pass, no extra memory.
//
// The schedule then runs on "scale-invariant" updates: tau starts at 0, the update trains at
// r x lr(floor(tau)) and advances tau by r, and the run ends when tau reaches the length of the
// reference schedule, T_SI. Between ceil(T_SI / S) and T_SI updates are needed: the gain decides
// how much of the larger batch turns into fewer updates.
//
//   AdaScaleGain gain = adascale_gain(/*batch=*/1024, /*reference=*/64, trace, gradient_sq);
//   double lr = gain.gain * schedule.lr_at(std::floor(tau));
//   tau += gain.gain;
#include <cstdint>
#include <string>

namespace bigbatch {

struct AdaScaleGain {
  double gain = 1;   // r
  double scale = 1;  // S = batch / reference
};

// The gain from the variance of a reference-batch gradient (sigma^2) and the squared norm of
// the true gradient (mu^2), at scale S. Negative estimates (early, noisy averages) count as 0;
// the result is clamped to [1, S] (to [S, 1] for a batch below the reference).
double adascale_gain_ratio(double scale, double variance, double gradient_sq);

// The gain for a batch of `batch` samples against `reference`, from the per-example gradient
// variance tr(Sigma) and |G|^2 as the noise-scale tracker averages them.
AdaScaleGain adascale_gain(double batch, double reference, double trace, double gradient_sq);

// "AdaScale: 412 updates for 2344 scale-invariant ones (mean gain 5.69 of S = 16)"
std::string describe_adascale_run(int64_t updates, double scale_invariant_updates, double scale);

}  // namespace bigbatch
