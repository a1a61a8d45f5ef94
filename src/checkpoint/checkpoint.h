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
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_paths.h"
#include "optim/optimizer.h"  // optimizer_state_bytes
#include "state/training_progress.h"

namespace bigbatch {

inline constexpr int64_t kCheckpointFormatVersion = 1;

// The part of a window accumulated before a mid-window checkpoint. Valid only for the plan it
// was accumulated under: the micro-batch size and world size are recorded with it.
struct PartialWindow {
  int64_t micro_batch_size = 0;
  int64_t world_size = 1;
  int64_t micro_batch_tokens = 0;        // --micro-batch-tokens it was cut under (0: by rows)
  WindowState window;                    // the engine's own account of the window
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

// The progress counters as a checkpoint's state.json holds them, and back, read as strictly
// (`source` names where they came from in errors): a loop of the user's keeps them in its own
// state (train/user_loop.h).
nlohmann::json progress_to_json(const TrainingProgress& progress);
TrainingProgress progress_from_json(const nlohmann::json& json, const std::string& source);

// A checkpoint in memory: the weights and buffers, the optimizer's state, the random generators
// and the progress, put back exactly (a branch test trains twice from one point). Gradients are
// not in it: it is taken at an update boundary, where none are accumulated.
//
//   const TrainingSnapshot start = TrainingSnapshot::take(*model, *optimizer, at);
//   ...train...
//   start.restore(*model, *optimizer, at);
class TrainingSnapshot {
 public:
  static TrainingSnapshot take(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                               const TrainingProgress& at);
  void restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
               TrainingProgress& at) const;

 private:
  std::vector<torch::Tensor> model_state_;  // io/safetensors.h's model_state order
  std::string optimizer_;                   // its libtorch archive
  std::vector<std::pair<std::string, torch::Tensor>> generators_;
  TrainingProgress at_;
};

}  // namespace bigbatch
