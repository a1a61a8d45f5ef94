#pragma once
// The configuration's named choices, each an enum with one name table (core/name_table.h):
// flags, config.toml, checkpoints, help and errors all spell them from here. Torch-free, so the
// configuration, the CLI and the fuzz targets share them with the engine.
//
//   TrainConfig config;
//   config.bn_mode = batch_norm_mode_names().parse("window");
//   std::string text = batch_norm_mode_names().name(config.bn_mode);  // "window"
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
// (train/custom_problem.h); the CLI cannot build or load them.
inline constexpr const char* kCustomPrefix = "cpp:";
bool is_custom(const std::string& name);
// Whether the named model has BatchNorm layers of its own (before any --norm rewrite).
bool has_batch_norm_layers(const std::string& model);
// Whether the named model reads token sequences (a language model) rather than images.
bool is_sequence_model(const std::string& model);

// What a sample and an item are (docs/design.md, "Tasks"): classify (an image and its label:
// items = samples, accuracy) or lm (a token sequence: items = its target tokens after the
// shift, padding excluded; loss per token, bits per byte). auto: from the dataset.
enum class TaskKind { Auto, Classify, Lm, Regress };
const NameTable<TaskKind>& task_names();
inline const char* to_string(TaskKind kind) {
  return task_names().name(kind);
}

// How a text corpus becomes samples: each document one sample (padded per micro-batch, cut at
// --seq-len), or documents joined by end-of-text and cut into blocks of --seq-len + 1.
// Auto: documents for text, packed for token files (as Megatron's and llm.c's loaders do: a
// document cut at --seq-len would lose the rest of every long one); TrainConfig::sequence_mode.
enum class SequenceMode { Auto, Documents, Packed };
const NameTable<SequenceMode>& sequence_mode_names();

// --token-dtype (tokens:PATH, data/token_files.h): auto (the file's header says; headerless
// files need one of the others).
enum class TokenDtype { Auto, Uint16, Uint32 };
const NameTable<TokenDtype>& token_dtype_names();
inline const char* to_string(TokenDtype dtype) {
  return token_dtype_names().name(dtype);
}
inline const char* to_string(SequenceMode mode) {
  return sequence_mode_names().name(mode);
}

enum class OptimizerKind { Sgd, AdamW, Lars, Lamb };
const NameTable<OptimizerKind>& optimizer_names();
// Adam-type optimizers (AdamW, LAMB): the square-root rule is theirs under --lr-scaling auto.
bool is_adaptive(OptimizerKind kind);
inline const char* to_string(OptimizerKind kind) {
  return optimizer_names().name(kind);
}

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

// The forward pass in fp32, or under bf16 autocast (fp32 weights, loss and gradients).
enum class Precision { Fp32, Bf16 };
const NameTable<Precision>& precision_names();
inline const char* to_string(Precision precision) {
  return precision_names().name(precision);
}

// Progress on stderr: a bar on a terminal, lines otherwise (auto), or nothing.
enum class ProgressMode { Auto, Bar, Lines, Off };
const NameTable<ProgressMode>& progress_mode_names();
inline const char* to_string(ProgressMode mode) {
  return progress_mode_names().name(mode);
}

}  // namespace bigbatch
