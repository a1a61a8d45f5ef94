#include "stats/metric_watch.h"

#include <cmath>

namespace bigbatch {

bool MetricWatch::observe(double value, int64_t step, bool rises, double min_delta) {
  if (step == counted_step)
    return false;
  counted_step = step;
  const bool improves = std::isfinite(value) &&
                        (!seen || (rises ? value - best > min_delta : best - value > min_delta));
  if (!improves) {
    since_best += 1;
    return false;
  }
  seen = true;
  best = value;
  best_step = step;
  since_best = 0;
  return true;
}

}  // namespace bigbatch
