#pragma once
// Runs a sweep's cells as child `bigbatch train` processes, several at once where cores allow,
// each in its own run directory with its output in logs/<cell>.log. Resumable: a cell whose
// run finished (weights.safetensors) is not rerun, one that checkpointed is resumed, one that
// left nothing usable starts again. SIGINT/SIGTERM stop the sweep after the running cells have
// checkpointed (they get the signal too); rerunning the same command continues it.
#include <cstdint>
#include <string>
#include <vector>

#include "config/stop_target.h"
#include "sweep/sweep_grid.h"

namespace bigbatch {

struct SweepOptions {
  SweepGrid grid;
  std::string out;           // the sweep directory
  std::string base_config;   // TOML of everything the cells share (written to out/base.toml)
  int64_t micro_batch = 32;  // per cell: SweepCell::micro_batch (at most the global batch)
  StopTarget target = StopTarget::accuracy(0.9);  // what each cell trains to
  int64_t max_epochs = 20;
  int64_t jobs = 1;
  int64_t threads_per_cell = 1;
  std::string binary;  // the bigbatch executable the cells run
};

// The child command that trains `cell` in `dir` (a resume when `dir` has checkpoints).
std::vector<std::string> sweep_cell_command(const SweepOptions& options, const SweepCell& cell,
                                            const std::string& dir);

// A rerun into a sweep's directory continues that sweep: the same grid, target and shared
// settings (base.toml). Anything else would mix two sweeps' cells in one summary, so it is
// refused in one line naming what differs. Call it before run_sweep (the sweep command does,
// before it says anything).
void check_rerun_is_the_same_sweep(const SweepOptions& options);

// Returns the process exit code: 0 when every cell ran to its end (target reached or not),
// else the first failing cell's code (128 + N after a signal). Writes summary.csv, summary.md
// and report.html into `out` either way.
int run_sweep(const SweepOptions& options);

// `bigbatch report SWEEP_DIR`: summary.csv, summary.md and report.html written again from the
// cells' run directories and the grid the sweep recorded (sweep.json). False when `dir` holds
// no sweep.json (it is no sweep directory, or one from before the grid was recorded).
bool rewrite_sweep_report(const std::string& dir);

}  // namespace bigbatch
