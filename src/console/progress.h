#pragma once
// Progress of a long run: a bar redrawn in place on a terminal and fitted to its width at each
// draw, plain lines with every field (elapsed time included) at a steady cadence otherwise
// (logs, CI, Slurm), or nothing. It only formats and throttles; the trainer owns
// the numbers.
//
//   Progress progress(ProgressMode::Auto, stderr);
//   ProgressState state;
//   state.epoch = 1;  state.epochs = 10;  state.step_in_epoch = 40;
//   progress.update(state);
//   progress.finish_epoch("epoch 1: test accuracy 88.1%");
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/name_table.h"

namespace bigbatch {

// Progress on stderr: a bar on a terminal, lines otherwise (auto), or nothing.
enum class ProgressMode { Auto, Bar, Lines, Off };
const NameTable<ProgressMode>& progress_mode_names();
inline const char* to_string(ProgressMode mode) {
  return progress_mode_names().name(mode);
}

struct ProgressState {
  int64_t epoch = 0;  // 1-based for display
  int64_t epochs = 0;
  int64_t step_in_epoch = 0;  // updates done in this epoch
  int64_t updates_per_epoch = 0;
  int64_t step = 0;  // updates done in the run
  int64_t total_updates = 0;
  double loss = 0;
  double samples_per_s = 0;
  double elapsed_s = 0;
  int64_t memory_bytes = 0;  // peak tensor memory of the last update (0: not shown)
  int64_t global_batch = 0;
  double noise_scale = 0;       // the gradient noise scale, beside the global batch (0: not shown)
  double lr_gain = 0;           // AdaScale's gain (0: not shown)
  std::string schedule_status;  // the run schedule's own state ("auto: check in 12"; empty: none)
};

// The status line: its fields in a fixed order, those that matter least dropped (and the bar
// shortened, then dropped) until it fits `width` columns; `width` 0 keeps every field. `bar`
// puts the epoch's bar first.
std::string progress_line(const ProgressState& state, size_t width, bool bar);

class Progress {
 public:
  Progress(ProgressMode mode, std::FILE* stream);
  void update(const ProgressState& state);
  // Prints a line that stays (the bar, if any, is cleared first).
  void message(const std::string& line);

 private:
  ProgressMode mode_;
  std::FILE* stream_;
  bool bar_visible_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace bigbatch
