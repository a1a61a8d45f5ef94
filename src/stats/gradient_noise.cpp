#include "stats/gradient_noise.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

const NameTable<NoiseGradient>& noise_gradient_names() {
  static const NameTable<NoiseGradient> table{"--noise-gradient",
                                              "--noise-gradient",
                                              {{NoiseGradient::Auto, "auto"},
                                               {NoiseGradient::Raw, "raw"},
                                               {NoiseGradient::Preconditioned, "preconditioned"}}};
  return table;
}

NoiseEstimate estimate_noise(const NoiseSample& s) {
  BB_INTERNAL_ASSERT(s.small_batch > 0 && s.big_batch > s.small_batch,
                     "the noise estimators need two nested batch sizes");
  NoiseEstimate e;
  e.gradient_sq = (s.big_batch * s.big_sq_norm - s.small_batch * s.small_sq_norm) /
                  (s.big_batch - s.small_batch);
  e.trace = (s.small_sq_norm - s.big_sq_norm) / (1.0 / s.small_batch - 1.0 / s.big_batch);
  return e;
}

void NoiseScaleTracker::add(const NoiseSample& sample, double update_batch) {
  const NoiseEstimate e = estimate_noise(sample);
  // The squares overflow long before the values do: a sample whose spread cannot be held is
  // left out whole, so the state stays finite (and a checkpoint readable).
  if (!std::isfinite(e.gradient_sq * e.gradient_sq) || !std::isfinite(e.trace * e.trace) ||
      !std::isfinite(e.trace * e.gradient_sq))
    return;
  if (state_.memory_batch <= 0 && update_batch > 0)
    state_.memory_batch = update_batch;
  // Memory in samples: a doubled batch's update counts as two of the first batch's. A fixed
  // batch's decay is beta itself (pow(beta, 1) is exact), as before the memory was in samples.
  const double beta = update_batch > 0 && state_.memory_batch > 0
                          ? std::pow(beta_, update_batch / state_.memory_batch)
                          : beta_;
  state_.gradient_sq_ema = beta * state_.gradient_sq_ema + (1 - beta) * e.gradient_sq;
  state_.trace_ema = beta * state_.trace_ema + (1 - beta) * e.trace;
  state_.weight = beta * state_.weight + (1 - beta);
  state_.gradient_sq_sq_ema =
      beta * state_.gradient_sq_sq_ema + (1 - beta) * e.gradient_sq * e.gradient_sq;
  state_.trace_sq_ema = beta * state_.trace_sq_ema + (1 - beta) * e.trace * e.trace;
  state_.product_ema = beta * state_.product_ema + (1 - beta) * e.trace * e.gradient_sq;
  state_.weight_sq = beta * beta * state_.weight_sq + (1 - beta) * (1 - beta);
  state_.gradient_sq_sum += e.gradient_sq;
  state_.trace_sum += e.trace;
  ++state_.samples;
  ++state_.spread_samples;
}

std::optional<NoiseScaleSummary> NoiseScaleTracker::summary() const {
  const auto value = noise_scale();
  if (!value)
    return std::nullopt;
  NoiseScaleSummary s;
  s.value = *value;
  s.updates = state_.samples;
  // A run resumed from a checkpoint that kept no spread has neither it nor the run's sums
  // for its earlier updates.
  if (state_.spread_samples != state_.samples)
    return s;
  if (state_.gradient_sq_sum > 0 && state_.trace_sum >= 0)
    s.run_average = state_.trace_sum / state_.gradient_sq_sum;
  // The variance of a weighted mean of independent draws: the draws' variance times
  // sum(w^2) / sum(w)^2. Successive updates see fresh samples, so their estimates' noise is
  // independent; the drift of the true values over the window only widens the range.
  const double w = state_.weight;
  const double g = gradient_sq(), t = trace();
  const double shrink = state_.weight_sq / (w * w);
  const double var_g = std::max(0.0, state_.gradient_sq_sq_ema / w - g * g) * shrink;
  const double var_t = std::max(0.0, state_.trace_sq_ema / w - t * t) * shrink;
  const double cov = (state_.product_ema / w - t * g) * shrink;
  const double g_error = std::sqrt(var_g);
  if (g <= 2 * g_error) {
    // |G|^2 may be zero: the noise scale has no upper bound.
    s.low = t > 0 ? std::max(0.0, t - 2 * std::sqrt(var_t)) / (g + 2 * g_error) : 0;
    s.high = std::numeric_limits<double>::infinity();
    return s;
  }
  double relative_sq = var_g / (g * g) - (t > 0 ? 2 * cov / (t * g) : 0);
  if (t > 0)
    relative_sq += var_t / (t * t);
  const double relative = std::sqrt(std::max(0.0, relative_sq));
  s.low = s.value * std::exp(-2 * relative);
  s.high = s.value * std::exp(2 * relative);
  return s;
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
  NoiseScaleSummary s;
  s.value = noise_scale;
  s.updates = updates;
  return critical_batch_verdict(batch, s, unit);
}

namespace {

enum class BatchVerdict { WellBelow, Near, FarAbove };

BatchVerdict verdict_of(double batch, double noise_scale) {
  const double ratio = batch / noise_scale;
  return ratio < 0.25 ? BatchVerdict::WellBelow
         : ratio <= 4 ? BatchVerdict::Near
                      : BatchVerdict::FarAbove;
}

const char* verdict_words(BatchVerdict v) {
  return v == BatchVerdict::WellBelow ? "well below"
         : v == BatchVerdict::Near    ? "near"
                                      : "far above";
}

// "over the last ~100 of 235 measured updates", or "over all 40 measured updates" (the EMA's
// memory is ~100). Measured: an update of one micro-batch (an epoch's short last window) has no
// smaller batch inside it, so a run's count can be below its updates.
std::string averaged_over(int64_t updates) {
  return updates <= 100 ? "over all " + std::to_string(updates) + " measured updates"
                        : "over the last ~100 of " + std::to_string(updates) + " measured updates";
}

// "210-390 samples within two standard errors" or "at least 70 samples (|G|^2 is within two
// standard errors of zero)"; empty when the spread is not known.
std::string noise_range(const NoiseScaleSummary& s, const char* unit) {
  if (s.high <= 0)
    return {};
  if (std::isinf(s.high)) {
    return (s.low > 0 ? "at least " + human_count(s.low) + " " + unit : std::string("unbounded")) +
           " within two standard errors, as |G|^2 is not clearly above zero";
  }
  return human_count(s.low) + "-" + human_count(s.high) + " " + unit +
         " within two standard errors";
}

}  // namespace

std::string critical_batch_verdict(double batch, const NoiseScaleSummary& noise,
                                   const std::string& unit) {
  const char* u = unit.c_str();
  const double noise_scale = noise.value;
  const auto updates = static_cast<long long>(noise.updates);
  const std::string range = noise_range(noise, u);
  const std::string average =
      noise.run_average > 0 ? human_count(noise.run_average) + " " + unit + " averaged over the run"
                            : std::string();
  std::string details;  // "; 210-390 ... errors; 350 samples averaged over the run"
  for (const std::string* part : {&range, &average}) {
    if (!part->empty())
      details += "; " + *part;
  }
  char line[900];
  if (noise.updates < kNoiseScaleSettledUpdates) {
    std::snprintf(line, sizeof line,
                  "gradient noise scale: B_noise ~ %s %s so far, from %lld updates: too few to "
                  "judge the batch (its average remembers ~100 updates; a verdict needs %lld)",
                  human_count(noise_scale).c_str(), u, updates,
                  static_cast<long long>(kNoiseScaleSettledUpdates));
    return line;
  }
  // The range's ends judge the batch differently: the estimate cannot tell which is right.
  // (A known spread has high > 0; its low end may be 0, which judges any batch far above.)
  const bool spread = noise.high > 0;
  const BatchVerdict at_low = verdict_of(batch, spread ? noise.low : noise_scale);
  const BatchVerdict at_high = verdict_of(batch, spread ? noise.high : noise_scale);
  if (noise_scale >= 1 && at_low != at_high) {
    std::snprintf(line, sizeof line,
                  "gradient noise scale: B_noise ~ %s %s %s, too noisy to judge whether the "
                  "global batch of %s %s is %s or %s the critical batch (%s%s%s); more "
                  "accumulation steps per update narrow it",
                  human_count(noise_scale).c_str(), u, averaged_over(noise.updates).c_str(),
                  human_count(batch).c_str(), u, verdict_words(at_high), verdict_words(at_low),
                  range.c_str(), average.empty() ? "" : "; ", average.c_str());
    return line;
  }
  if (noise_scale < 1) {
    const std::string one = unit == "samples" ? "sample" : unit.substr(0, unit.size() - 1);
    std::snprintf(line, sizeof line,
                  "gradient noise scale: B_noise ~ %.3g %s, under one %s, from %lld updates: "
                  "the gradient barely varies from batch to batch, so any batch is far above the "
                  "critical one and a smaller one would reach the same loss with fewer %s",
                  noise_scale, u, one.c_str(), updates, u);
    return line;
  }
  const BatchTradeoff t = batch_tradeoff(batch, noise_scale);
  const BatchVerdict verdict = verdict_of(batch, noise_scale);
  const char* where = verdict_words(verdict);
  char tail[320];
  if (verdict == BatchVerdict::WellBelow) {
    std::snprintf(tail, sizeof tail,
                  "updates are the cost here: a larger batch would need fewer of them (with the "
                  "learning rate scaled) at little extra compute");
  } else if (verdict == BatchVerdict::Near) {
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
                "B_noise ~ %s %s, averaged %s%s): reaching a loss takes %.2fx the minimum "
                "updates and %.2fx the minimum %s; %s",
                human_count(batch).c_str(), u, where, human_count(noise_scale).c_str(), u,
                averaged_over(noise.updates).c_str(), details.c_str(), t.steps_factor,
                t.samples_factor, u, tail);
  return line;
}

}  // namespace bigbatch
