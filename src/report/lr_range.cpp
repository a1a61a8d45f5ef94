#include "report/lr_range.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "report/run_records.h"

namespace bigbatch {

namespace {

constexpr double kSmoothing = 0.98;    // fastai's and Lightning's beta
constexpr double kDivergedFactor = 4;  // fastai's stop: 4x the lowest loss so far

}  // namespace

LrRangeReading read_lr_range(const std::vector<LrRangePoint>& points) {
  std::vector<ChartPoint> raw;
  for (const LrRangePoint& p : points) {
    if (std::isfinite(p.lr) && p.lr > 0)
      raw.push_back({p.lr, p.loss});
  }
  LrRangeReading reading;
  for (const ChartPoint& p : smoothed(raw, kSmoothing))
    reading.smoothed.push_back({p.x, p.y});
  const auto& curve = reading.smoothed;
  if (curve.size() < kMinLrRangePoints) {
    throw Error(ErrorKind::Data,
                "the range test has " + std::to_string(curve.size()) +
                    " update(s) with a finite loss; reading it takes at least " +
                    std::to_string(kMinLrRangePoints),
                "run more updates (--updates), or start from a lower rate (--lr-min)");
  }
  reading.end = curve.size();
  double lowest_so_far = curve[0].loss;
  for (size_t i = 1; i < curve.size(); ++i) {
    // A loss that reaches zero or below (a module's own) has no "4x the lowest" to pass.
    if (lowest_so_far > 0 && curve[i].loss > kDivergedFactor * lowest_so_far) {
      reading.end = i;
      reading.diverged = true;
      break;
    }
    lowest_so_far = std::min(lowest_so_far, curve[i].loss);
  }
  if (reading.end < kMinLrRangePoints) {
    throw Error(ErrorKind::Data,
                "the range test's loss diverged after " + std::to_string(reading.end) +
                    " update(s); reading it takes at least " + std::to_string(kMinLrRangePoints),
                "start from a lower rate (--lr-min), or run more updates (--updates)");
  }
  reading.lowest = 0;
  for (size_t i = 1; i < reading.end; ++i) {
    if (curve[i].loss < curve[reading.lowest].loss)
      reading.lowest = i;
  }
  // The slope against log(rate) by central differences (one-sided at the ends), over the
  // points after the average settled and up to the lowest loss.
  const size_t skip = std::min<size_t>(10, reading.end / 10);
  size_t begin = skip;
  size_t last = reading.lowest;
  if (last < begin + 2) {  // the loss fell from the start: read the whole curve
    begin = 0;
    last = reading.end - 1;
  }
  auto slope = [&](size_t i) {
    const size_t a = i == 0 ? 0 : i - 1;
    const size_t b = std::min(i + 1, reading.end - 1);
    const double run = std::log(curve[b].lr) - std::log(curve[a].lr);
    return run > 0 ? (curve[b].loss - curve[a].loss) / run : 0.0;
  };
  reading.steepest = begin;
  for (size_t i = begin; i <= last; ++i) {
    if (slope(i) < slope(reading.steepest))
      reading.steepest = i;
  }
  reading.suggested_lr = curve[reading.steepest].lr;
  reading.lowest_lr_over_10 = curve[reading.lowest].lr / 10;
  reading.start_loss = curve[0].loss;
  const double scale = std::abs(reading.start_loss);
  reading.fall = scale > 0 ? (reading.start_loss - curve[reading.lowest].loss) / scale : 0.0;
  reading.fell_clearly = reading.fall >= kClearFall;
  return reading;
}

}  // namespace bigbatch
