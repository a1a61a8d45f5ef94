#pragma once
// The learning-rate range test's reading (`bigbatch lr-find`): a short run whose rate rises
// exponentially from low to high, one loss per update, and the rate to train at suggested from
// the curve, as Lightning's lr_find and fastai's lr_find read it:
//
//   - the loss is smoothed (the debiased moving average of report/run_records.h, weight 0.98);
//   - the curve ends where it diverged: the first smoothed loss over 4x the lowest before it
//     (fastai's stop), or the last update;
//   - the suggestion is the rate of the steepest descent: the most negative slope of the smoothed
//     loss against log(rate), between the first tenth of the points (at most 10: the average
//     is still settling there) and the lowest loss (Lightning's suggestion());
//   - the rate of the lowest loss, divided by 10, is given beside it (fastai's lr_min rule);
//   - neither is a reading when the smoothed loss did not clearly fall: below kClearFall of its
//     start, the steepest point of a flat curve is noise, and no rate is suggested.
//
//   std::vector<LrRangePoint> points = ...;   // (rate, loss) per update, rising rates
//   LrRangeReading reading = read_lr_range(points);
//   reading.suggested_lr;
#include <cstddef>
#include <string>
#include <vector>

namespace bigbatch {

struct LrRangePoint {
  double lr = 0;
  double loss = 0;
};

struct LrRangeReading {
  std::vector<LrRangePoint> smoothed;  // the finite points, smoothed, up to the end
  size_t end = 0;                      // points of `smoothed` that count (the rest diverged)
  bool diverged = false;               // the loss rose past 4x its lowest before the last update
  size_t lowest = 0;                   // index of the lowest smoothed loss
  size_t steepest = 0;                 // index of the steepest descent
  double suggested_lr = 0;             // the rate at `steepest`
  double lowest_lr_over_10 = 0;        // the rate at `lowest`, / 10
  double start_loss = 0;               // the smoothed loss at the first point
  double fall = 0;                     // (start - lowest) / |start|: how far the loss fell
  bool fell_clearly = false;           // fall >= kClearFall: the rates above are a reading
};

// A range test whose smoothed loss fell by less than this fraction of its start suggests nothing
// (a run that learns falls by tens of percent; 1.437 to 1.393, 3%, read as a steepest point,
// once suggested 7.1e-06 for a model that trains at 3e-3).
inline constexpr double kClearFall = 0.10;

// Error (Data) when fewer than kMinLrRangePoints finite losses are there to read: the range was
// too short, or the loss was never finite.
LrRangeReading read_lr_range(const std::vector<LrRangePoint>& points);

inline constexpr size_t kMinLrRangePoints = 10;

}  // namespace bigbatch
