#pragma once
// The models' named choices: the built-in models and the prefixes of the others, how BatchNorm
// meets accumulation, and the --norm rewrite. Torch-free: the configuration names them too.
#include <string>

#include "core/name_table.h"

namespace bigbatch {

// The built-in models (models/models.h builds them).
enum class BuiltinModel { Mlp, Cnn, CnnBn, CnnGn, Gpt };
const NameTable<BuiltinModel>& builtin_model_names();
// --model torchscript:FILE: a module scripted in PyTorch (models/scripted_model.h). Its layers
// are known only once it is loaded, so the functions below say false for it.
inline constexpr const char* kTorchScriptPrefix = "torchscript:";
bool is_torchscript_model(const std::string& model);
std::string torchscript_path(const std::string& model);  // the FILE of torchscript:FILE
// --model cpp:NAME and --dataset cpp:NAME: given by a C++ program through the library
// (train/custom_problem.h); python:NAME, by a Python program through the bigbatch package
// (docs/python.md). The CLI cannot build or load either.
inline constexpr const char* kCustomPrefix = "cpp:";
inline constexpr const char* kPythonPrefix = "python:";
bool is_custom(const std::string& name);
// Who gives a custom model or dataset, for messages: "a C++ program through the bigbatch library
// (docs/library.md)", or the Python package's.
std::string custom_origin(const std::string& name);
// Whether the named model has BatchNorm layers of its own (before any --norm rewrite).
bool has_batch_norm_layers(const std::string& model);
// Whether the named model reads token sequences (a language model) rather than images.
bool is_sequence_model(const std::string& model);

// BatchNorm under accumulation (models/models.h): statistics per micro-batch (ghost batch
// norm), pooled over the window, or frozen running statistics.
enum class BatchNormMode { Micro, Window, Frozen };
const NameTable<BatchNormMode>& batch_norm_mode_names();
inline const char* to_string(BatchNormMode mode) {
  return batch_norm_mode_names().name(mode);
}

// --norm: keep the model's BatchNorm layers, or rewrite them as GroupNorm.
enum class NormKind { Batch, Group };
const NameTable<NormKind>& norm_names();
inline const char* to_string(NormKind kind) {
  return norm_names().name(kind);
}

}  // namespace bigbatch
