#pragma once
// A run's metrics.jsonl read back, sorted by kind of line: what the run report and the sweep
// summary are built from. The last line, when a crash cut it short, is skipped; any other line
// that is not a JSON object is refused. Fields bigbatch does not know are ignored (a newer
// version's records).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "report/svg_chart.h"

namespace bigbatch {

struct RunRecords {
  std::vector<nlohmann::json> updates;  // one per optimizer update (has "loss")
  std::vector<nlohmann::json> epochs;   // one per evaluated epoch (has "epoch", "train_loss")
  std::vector<nlohmann::json> events;   // "event": train_start, oom_backoff, target_reached
  // --eval-every's evaluations ("event": "evaluation", also among the events).
  std::vector<nlohmann::json> evaluations;
  // Every record with held-out figures, by step: the epochs' and the intervals'.
  std::vector<nlohmann::json> held_out() const;
};

// Throws bigbatch::Error (Format) naming the file and the line when a line other than the last
// is not a JSON object (an array, NaN), and the field when one bigbatch reads holds a value of
// another type (a string step, an object as a loss).
RunRecords read_run_records(const std::string& metrics_path);

// The check read_run_records makes of each line (`line` counts from 1).
void check_metrics_record(const nlohmann::json& record, const std::string& metrics_path,
                          size_t line);

// (x, y * scale) for every record holding both keys as numbers (nulls are skipped).
std::vector<ChartPoint> record_points(const std::vector<nlohmann::json>& records, const char* x_key,
                                      const char* y_key, double scale = 1.0);

// A noisy per-update curve smoothed as TensorBoard's slider does: an exponential moving average
// with `weight` (0.9: about the last 10 points), debiased so that its start is not pulled
// towards 0. Non-finite points are left out (a skipped update's loss).
std::vector<ChartPoint> smoothed(const std::vector<ChartPoint>& points, double weight = 0.9);

}  // namespace bigbatch
