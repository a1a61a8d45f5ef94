#pragma once
// What a sweep found, per cell and as a whole: read from each cell's run directory (so a
// summary can be rebuilt at any time), written as summary.csv, summary.md and report.html —
// updates to the target against the global batch on log-log axes (Shallue et al.'s regimes:
// perfect scaling, diminishing returns, maximal parallelism, with the measured critical batch
// marked), the best value of the target's metric against the global batch per LR rule, and
// every cell's curve of that metric against updates and against samples. The target is any
// `--target` of train's (config/stop_target.h): val_accuracy>=0.9, val_bpb<=1.9, ...
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/stop_target.h"
#include "report/svg_chart.h"
#include "sweep/sweep_grid.h"

namespace bigbatch {

struct CellResult {
  SweepCell cell;
  std::string status;  // "done", "failed (exit N)", "interrupted", "not run"
  int64_t updates = 0;
  int64_t samples = 0;
  double peak_lr = 0;
  // The target (from the cell's target_reached event): updates, samples, seconds.
  bool reached = false;
  int64_t updates_to_target = 0;
  int64_t samples_to_target = 0;
  double seconds_to_target = 0;
  // The target's metric at the cell's best epoch (the highest accuracy, the lowest loss),
  // and its key in the epoch records ("val_accuracy", "test_bpb").
  std::optional<double> best;
  std::string metric;
  std::optional<double> final_train_loss;
  std::optional<double> mean_noise_scale;  // over the updates that measured it
  std::vector<ChartPoint> curve_by_updates;
  std::vector<ChartPoint> curve_by_samples;
};

// Reads `cell_dir` (missing or empty: status "not run").
CellResult read_cell_result(const SweepCell& cell, const std::string& cell_dir,
                            const StopTarget& target);

// The target as a sweep's tables and charts say it: "90%" for an accuracy, "val_bpb <= 1.9".
std::string target_text(const StopTarget& target);
// A value of the target's metric as shown: accuracies in percent, others as they are.
std::string metric_text(const StopTarget& target, double value);

std::string summary_csv(const std::vector<CellResult>& results);
std::string summary_markdown(const std::vector<CellResult>& results, const StopTarget& target);
std::string sweep_report_html(const std::vector<CellResult>& results, const StopTarget& target,
                              const std::string& title);

}  // namespace bigbatch
