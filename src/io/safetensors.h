#pragma once
// Model weights in the safetensors format, readable by Python's safetensors.torch.load_file.
// The file holds every parameter and buffer (BatchNorm running statistics included) under its
// nn.Sequential name, as F32 (I64 for counters). Loading checks names, shapes and dtypes and
// names the first mismatch; a model is never left half-loaded.
//
//   save_weights("runs/a/weights.safetensors", *model, {{"model", "cnn"}});
//   load_weights("init.safetensors", *model);
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/files.h"

namespace bigbatch {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Parameters then buffers, in module order.
NamedTensors model_state(torch::nn::Module& model);

// `links`: as core/files.h's atomic_write_file (Replace for a run directory's own files).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata,
                      Links links = Links::Follow);
NamedTensors load_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);

void save_weights(const std::string& path, torch::nn::Module& model,
                  const std::map<std::string, std::string>& metadata, Links links = Links::Follow);
void load_weights(const std::string& path, torch::nn::Module& model);

}  // namespace bigbatch
