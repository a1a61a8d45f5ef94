#include "schedule/adascale.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

double adascale_gain_ratio(double scale, double variance, double gradient_sq) {
  BB_INTERNAL_ASSERT(scale > 0, "AdaScale's scale must be positive");
  const double v = std::max(variance, 0.0);
  const double g = std::max(gradient_sq, 0.0);
  const double low = std::min(1.0, scale);
  const double high = std::max(1.0, scale);
  if (v == 0)
    return 1;  // an exact gradient: a larger batch buys no larger step
  if (g == 0)
    return scale;  // pure noise: the larger batch's variance reduction is all gain
  return std::clamp((v + g) / (v / scale + g), low, high);
}

AdaScaleGain adascale_gain(double batch, double reference, double trace, double gradient_sq) {
  BB_INTERNAL_ASSERT(batch > 0 && reference > 0, "AdaScale needs positive batch sizes");
  AdaScaleGain result;
  result.scale = batch / reference;
  result.gain = adascale_gain_ratio(result.scale, trace / reference, gradient_sq);
  return result;
}

std::string describe_adascale_run(int64_t updates, double scale_invariant_updates, double scale) {
  const double mean_gain = updates > 0 ? scale_invariant_updates / double(updates) : 0;
  return "AdaScale: " + std::to_string(updates) + " updates for " +
         format_significant(scale_invariant_updates, 5) + " scale-invariant ones (mean gain " +
         format_significant(mean_gain, 3) + " of S = " + format_significant(scale, 4) + ")";
}

}  // namespace bigbatch
