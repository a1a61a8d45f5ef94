#pragma once
// Where checkpoints live in a run directory (RUN/checkpoints/step_000123/) and how to find
// the newest complete one. Torch-free: the CLI resolves --resume before any model exists.
//
//   std::string dir = find_latest_checkpoint("runs/a");   // runs/a/checkpoints/step_000470
//   std::string run = run_directory_of_checkpoint(dir);   // runs/a
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

// "step_000123" at an update boundary; "step_000123_0005" five micro-steps into update 124.
std::string checkpoint_directory_name(int64_t step, int64_t micro_step = 0);

// Complete checkpoints (those with a state.json) of a run, oldest first, keyed by
// step x 1,000,000 + micro-step.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);

// `path` is a run directory (its newest complete checkpoint is taken) or a checkpoint
// directory. Throws bigbatch::Error (Format) when there is none.
std::string find_latest_checkpoint(const std::string& path);

// Removes what interrupted checkpoint writes and prunings leave in RUN/checkpoints (unfinished
// ".tmp-step_N-PID" directories, ".trash-step_N-PID" ones renamed away for deletion) and
// returns how many there were. Call only with the run directory locked (core/files.h), so that
// no other process is writing them.
int64_t remove_checkpoint_leftovers(const std::string& run_dir);

// The complete checkpoints of its run that are newer than `checkpoint_dir`, oldest first. A
// resume from an older checkpoint starts a new history: these belong to the abandoned one.
std::vector<std::string> newer_checkpoints(const std::string& checkpoint_dir);

// Moves `checkpoints` (of `run_dir`; or a failed run's records) into RUN/abandoned/NAME/, where
// no resume or pruning looks, and returns that directory. Call only with the run directory locked.
std::string set_checkpoints_aside(const std::string& run_dir,
                                  const std::vector<std::string>& checkpoints,
                                  const std::string& name);

// RUN/checkpoints/step_N -> RUN.
std::string run_directory_of_checkpoint(const std::string& checkpoint_dir);

// Where a run's weights are read from by the commands that use a trained run (evaluate, predict,
// sample): `path` is a run directory or one of its checkpoints. A finished run's
// weights.safetensors; a run stopped before its end (Ctrl-C, kill -9) has none, and its newest
// complete checkpoint's weights are taken; a checkpoint directory gives its own. `note` says
// which checkpoint was taken ("" for the final weights). Error (Io) when the run directory has
// no config.toml, or neither weights nor a complete checkpoint.
struct RunWeights {
  std::string run_dir;
  std::string weights;
  std::string note;
};
RunWeights find_run_weights(const std::string& path);

}  // namespace bigbatch
