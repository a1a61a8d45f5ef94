#pragma once
// The configuration's own named choices, each an enum with one name table (core/name_table.h):
// flags, config.toml, checkpoints, help and errors all spell them from here. Torch-free, so the
// configuration, the CLI and the fuzz targets share them with the engine. A choice that is a
// lower module's vocabulary lives in that module (data/token_dtype.h,
// models/model_choices.h, console/progress.h) and the configuration includes it.
//
//   TrainConfig config;
//   config.optimizer = optimizer_names().parse("adamw");
//   std::string text = optimizer_names().name(config.optimizer);  // "adamw"
#include <string>

#include "core/name_table.h"

namespace bigbatch {

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
inline const char* to_string(SequenceMode mode) {
  return sequence_mode_names().name(mode);
}

enum class OptimizerKind { Sgd, AdamW, Lars, Lamb };
const NameTable<OptimizerKind>& optimizer_names();
inline const char* to_string(OptimizerKind kind) {
  return optimizer_names().name(kind);
}

// The forward pass in fp32, or under bf16 autocast (fp32 weights, loss and gradients).
enum class Precision { Fp32, Bf16 };
const NameTable<Precision>& precision_names();
inline const char* to_string(Precision precision) {
  return precision_names().name(precision);
}

}  // namespace bigbatch
