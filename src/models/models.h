#pragma once
// The model zoo, built as torch::nn::Sequential so that parameter names ("0.weight",
// "3.bias", ...) are exactly those of the same nn.Sequential in PyTorch: weights move between
// bigbatch and Python through safetensors with no renaming (docs/weights.md lists them).
//
//   torch::manual_seed(42);                       // initialisation is deterministic per seed
//   ModelSpec spec;
//   spec.name = "cnn";  spec.height = 28;  spec.width = 28;
//   auto model = make_model(spec);
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "models/model_choices.h"

namespace bigbatch {

struct ModelSpec {
  std::string name = "cnn";  // one of builtin_model_names()
  std::vector<int64_t> hidden = {512, 256};
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t classes = 10;
  GptOptions gpt{};  // gpt: vocabulary, positions, depth and width
};

torch::nn::Sequential make_model(const ModelSpec& spec);

// True when the model normalises over the batch: accumulation then differs from one big
// batch (statistics per micro-batch), which the trainer says out loud.
bool uses_batch_statistics(torch::nn::Module& model);
// The names of those layers ("1", "5" in a Sequential), as in the weights files.
std::vector<std::string> batch_statistics_layers(torch::nn::Module& model);
// Dropout layers that draw masks in training (p > 0, training mode), by name: a split of a
// batch draws their random numbers in another order, so it cannot equal one batch exactly.
std::vector<std::string> dropout_layers(torch::nn::Module& model);
// Those layers into eval mode (they pass their inputs through), and in a user's module kept
// there through train(): what `verify` compares the arithmetic of accumulation without.
void turn_off_dropout(torch::nn::Module& model);

int64_t parameter_count(torch::nn::Module& model);

// The libtorch this binary is built against: "libtorch 1.13.0", or "libtorch 2.15.0 with CUDA"
// (what `--version` and the start of a run say; TorchScript files of a newer PyTorch may use
// operators it does not know).
std::string libtorch_description();

// Where a model lives: its parameters' device (its buffers' for a model without parameters;
// the CPU for one with neither). The engine, evaluation and checkpoints follow it.
torch::Device model_device(const torch::nn::Module& model);

// BatchNorm under accumulation (docs/design.md, invariant 6). Micro: statistics over each
// micro-batch (ghost batch norm, ghost size = the micro-batch). Frozen: the running statistics
// normalise in training too, so no sample depends on another and accumulation is exact (for
// fine-tuning from trained weights; from scratch the running statistics are the identity).
// Window: statistics pooled over the whole accumulation window (train/window_batch_norm.h);
// the layers train normally outside windows.

// Puts the BatchNorm layers into the mode; call after model->train().
void apply_batch_norm_mode(torch::nn::Module& model, BatchNormMode mode);

// The running-statistics momentum per micro-step that moves the running averages over one
// update of `micro_steps` micro-batches as `momentum` moves them over one batch:
// 1 - (1 - momentum)^(1 / micro_steps). Keeps their horizon in updates whatever the
// accumulation.
double micro_step_momentum(double momentum, int64_t micro_steps);
void set_batch_norm_momentum(torch::nn::Module& model, double momentum);

// The same network with every BatchNorm2d replaced by GroupNorm over the same channels
// (--norm group): per-sample normalisation, so accumulation is exact. Layer names (indices)
// are unchanged.
torch::nn::Sequential rewrite_batch_norm_as_group_norm(const torch::nn::Sequential& model);

}  // namespace bigbatch
