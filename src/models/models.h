#pragma once
// The model zoo, built as torch::nn::Sequential so that parameter names ("0.weight",
// "3.bias", ...) are exactly those of the same nn.Sequential in PyTorch: weights move between
// bigbatch and Python through safetensors with no renaming (docs/weights.md lists them).
//
//   torch::manual_seed(42);                       // initialisation is deterministic per seed
//   auto model = make_model({.name = "cnn", .height = 28, .width = 28});
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct ModelSpec {
  std::string name = "cnn";  // mlp | cnn | cnn-bn | cnn-gn
  std::vector<int64_t> hidden = {512, 256};
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t classes = 10;
};

torch::nn::Sequential make_model(const ModelSpec& spec);

// True when the model normalises over the batch: accumulation then differs from one big
// batch (statistics per micro-batch), which the trainer says out loud.
bool uses_batch_statistics(torch::nn::Module& model);
// The names of those layers ("1", "5" in a Sequential), as in the weights files.
std::vector<std::string> batch_statistics_layers(torch::nn::Module& model);

int64_t parameter_count(torch::nn::Module& model);

}  // namespace bigbatch
