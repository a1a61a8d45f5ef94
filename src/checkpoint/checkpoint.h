#pragma once
// Checkpoints: versioned directories that make a run resumable bit for bit.
//
//   RUN/checkpoints/step_000123/
//     weights.safetensors   model parameters and buffers
//     optimizer.pt          optimizer state (libtorch archive: momentum / Adam moments)
//     rng.safetensors       libtorch's CPU generator state
//     state.json            format version, progress counters, what the run was (model,
//                           dataset, batch plan, seed, ...)
//
// A checkpoint is written under a temporary name (.tmp-step_000123-PID), every file fsynced,
// then renamed into place and the directory fsynced: the rename is the commit point, so a
// crash at any moment leaves the previous checkpoints intact and never a half-written one.
// After each write only the newest `keep` checkpoints remain.
//
//   write_checkpoint(run_dir, progress, identity, *model, *optimizer, /*keep=*/3);
//   std::string dir = find_latest_checkpoint(run_dir);
//   TrainingProgress p = read_checkpoint(dir, identity, *model, *optimizer);
#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/checkpoint_paths.h"
#include "stats/gradient_noise.h"
#include "train/accumulation_engine.h"

namespace bigbatch {

inline constexpr int64_t kCheckpointFormatVersion = 1;

// Where the fit loop stands: enough to continue exactly. Saved at update boundaries.
struct TrainingProgress {
  int64_t step = 0;             // updates done
  int64_t epoch = 0;            // the epoch the next update belongs to (0-based)
  int64_t update_in_epoch = 0;  // the next update's index within that epoch
  // Samples of the epoch's order already used: where the next window starts. Equal to
  // update_in_epoch x global batch unless the batch changed inside the epoch (a ramp); -1 in a
  // checkpoint from before it was saved (the trainer then derives it).
  int64_t position_in_epoch = 0;
  // The global batch of the last update done (0: none yet): a batch ramp resumes under it, so
  // a step reached at the next update is switched to, and announced, exactly once.
  int64_t global_batch = 0;
  int64_t samples_seen = 0;
  double train_seconds = 0;
  // The current epoch's running sums, for its train_loss / train_accuracy record.
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0;
  int64_t epoch_items = 0;
  // Micro-steps of the next update already done (0 at an update boundary). A checkpoint taken
  // inside a window also holds that window's accumulated gradients and totals.
  int64_t micro_step = 0;
  // The gradient noise scale's running averages, so a resumed run continues the same estimate.
  NoiseScaleState noise;
  // AdaScale's scale-invariant updates so far (tau; 0 under the other rules).
  double scale_invariant_step = 0;
  // metrics.jsonl's length when the checkpoint was written (its lines are flushed first): a
  // resumed run cuts the file back to exactly this, dropping every line the interrupted process
  // wrote after it, events included. -1 in checkpoints from before it was saved (resume then
  // drops the lines of later steps).
  int64_t metrics_bytes = -1;
  // The step at which the last epoch record (with its evaluation) was written, so a resumed run
  // with nothing left to train does not evaluate and record the same point twice.
  int64_t recorded_epoch_step = -1;
  // Out-of-memory back-offs so far in the run.
  int64_t oom_backoffs = 0;
};

// The part of a window accumulated before a mid-window checkpoint. Valid only for the plan it
// was accumulated under: the micro-batch size and world size are recorded with it.
struct PartialWindow {
  int64_t micro_batch_size = 0;
  int64_t world_size = 1;
  WindowState totals;                    // the engine's own account of the window
  std::vector<torch::Tensor> gradients;  // in parameter order
};

// What must match for a checkpoint to be resumed: a JSON object of named fields. The world
// size and micro-batch are deliberately absent — they may change on resume; the global batch
// stays.
nlohmann::json checkpoint_identity(const std::string& model, const std::vector<int64_t>& hidden,
                                   const std::string& dataset, int64_t dataset_size,
                                   int64_t global_batch, uint64_t seed, bool shuffle,
                                   const std::string& optimizer);

// `window` is required when progress.micro_step > 0.
void write_checkpoint(const std::string& run_dir, const TrainingProgress& progress,
                      const nlohmann::json& identity, torch::nn::Module& model,
                      torch::optim::Optimizer& optimizer, int64_t keep, const nlohmann::json& plan,
                      const PartialWindow* window = nullptr);

// Loads weights and optimizer state after checking the format version and the identity;
// any difference is a bigbatch::Error (Format) naming the field, the checkpoint's value and
// the current one.
// A mid-window checkpoint's partial window goes to `window` (when given); the caller decides
// whether it still applies (same micro-batch and world size) or the window is replayed.
TrainingProgress read_checkpoint(const std::string& checkpoint_dir, const nlohmann::json& identity,
                                 torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                 PartialWindow* window = nullptr);

}  // namespace bigbatch
