#include "stats/gradient_noise.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

NoiseEstimate estimate_noise(const NoiseSample& s) {
  BB_INTERNAL_ASSERT(s.small_batch > 0 && s.big_batch > s.small_batch,
                     "the noise estimators need two nested batch sizes");
  NoiseEstimate e;
  e.gradient_sq = (s.big_batch * s.big_sq_norm - s.small_batch * s.small_sq_norm) /
                  (s.big_batch - s.small_batch);
  e.trace = (s.small_sq_norm - s.big_sq_norm) / (1.0 / s.small_batch - 1.0 / s.big_batch);
  return e;
}

void NoiseScaleTracker::add(const NoiseSample& sample) {
  const NoiseEstimate e = estimate_noise(sample);
  if (!std::isfinite(e.gradient_sq) || !std::isfinite(e.trace))
    return;
  state_.gradient_sq_ema = beta_ * state_.gradient_sq_ema + (1 - beta_) * e.gradient_sq;
  state_.trace_ema = beta_ * state_.trace_ema + (1 - beta_) * e.trace;
  state_.weight = beta_ * state_.weight + (1 - beta_);
  ++state_.samples;
}

double NoiseScaleTracker::gradient_sq() const {
  return state_.weight > 0 ? state_.gradient_sq_ema / state_.weight : 0;
}

double NoiseScaleTracker::trace() const {
  return state_.weight > 0 ? state_.trace_ema / state_.weight : 0;
}

std::optional<double> NoiseScaleTracker::noise_scale() const {
  if (state_.samples == 0 || gradient_sq() <= 0 || trace() < 0)
    return std::nullopt;
  return trace() / gradient_sq();
}

BatchTradeoff batch_tradeoff(double batch, double noise_scale) {
  return {1 + noise_scale / batch, 1 + batch / noise_scale};
}

std::string critical_batch_verdict(double batch, double noise_scale, int64_t updates,
                                   const std::string& unit) {
  const char* u = unit.c_str();
  char line[720];
  if (updates < kNoiseScaleSettledUpdates) {
    std::snprintf(line, sizeof line,
                  "gradient noise scale: B_noise ~ %s %s so far, from %lld updates: too few to "
                  "judge the batch (its average remembers ~100 updates; a verdict needs %lld)",
                  human_count(noise_scale).c_str(), u, static_cast<long long>(updates),
                  static_cast<long long>(kNoiseScaleSettledUpdates));
    return line;
  }
  if (noise_scale < 1) {
    const std::string one = unit == "samples" ? "sample" : unit.substr(0, unit.size() - 1);
    std::snprintf(line, sizeof line,
                  "gradient noise scale: B_noise ~ %.3g %s, under one %s, from %lld updates: "
                  "the gradient barely varies from batch to batch, so any batch is far above the "
                  "critical one and a smaller one would reach the same loss with fewer %s",
                  noise_scale, u, one.c_str(), static_cast<long long>(updates), u);
    return line;
  }
  const BatchTradeoff t = batch_tradeoff(batch, noise_scale);
  const double ratio = batch / noise_scale;
  const char* where = ratio < 0.25 ? "well below" : ratio <= 4 ? "near" : "far above";
  char tail[320];
  if (ratio < 0.25) {
    std::snprintf(tail, sizeof tail,
                  "updates are the cost here: a larger batch would need fewer of them (with the "
                  "learning rate scaled) at little extra compute");
  } else if (ratio <= 4) {
    std::snprintf(tail, sizeof tail,
                  "a balance of updates and %s (both %.1fx their minimum at B = B_noise)", u, 2.0);
  } else {
    std::snprintf(tail, sizeof tail,
                  "%s are the cost here: a smaller batch would reach the same loss with fewer "
                  "of them and barely more updates",
                  u);
  }
  std::snprintf(line, sizeof line,
                "global batch of %s %s is %s the measured critical batch (gradient noise scale "
                "B_noise ~ %s %s, an average over the last ~100 of %lld updates): reaching a "
                "loss takes %.2fx the minimum updates and %.2fx the minimum %s; %s",
                human_count(batch).c_str(), u, where, human_count(noise_scale).c_str(), u,
                static_cast<long long>(updates), t.steps_factor, t.samples_factor, u, tail);
  return line;
}

}  // namespace bigbatch
