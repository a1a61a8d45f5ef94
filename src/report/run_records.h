#pragma once
// A run's metrics.jsonl read back, sorted by kind of line: what the run report and the sweep
// summary are built from. The last line, when a crash cut it short, is skipped silently; any
// other line that is no record (not JSON, not an object, a field bigbatch reads holding another
// type) is skipped and listed with its reason, for the reader to say. Fields bigbatch does not
// know are ignored (a newer version's records).
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
  // Lines that were no record, each "line 7: not JSON: invalid string: ill-formed UTF-8 byte"
  // (not the last line a crash cut short).
  std::vector<std::string> skipped;
};

RunRecords read_run_records(const std::string& metrics_path);

// The check read_run_records makes of each parsed line, as an error (Format) naming the file,
// the line (from 1) and the field: for readers that must not carry on past a bad record.
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
