#include "config/modes.h"

namespace bigbatch {

// Function-local statics: built on first use, so no static initialisation order to depend on.

const NameTable<BuiltinModel>& builtin_model_names() {
  static const NameTable<BuiltinModel> table{"model",
                                             "--model",
                                             {{BuiltinModel::Mlp, "mlp"},
                                              {BuiltinModel::Cnn, "cnn"},
                                              {BuiltinModel::CnnBn, "cnn-bn"},
                                              {BuiltinModel::CnnGn, "cnn-gn"},
                                              {BuiltinModel::Gpt, "gpt"}}};
  return table;
}

bool is_torchscript_model(const std::string& model) {
  return model.rfind(kTorchScriptPrefix, 0) == 0;
}

std::string torchscript_path(const std::string& model) {
  return is_torchscript_model(model) ? model.substr(std::string(kTorchScriptPrefix).size()) : "";
}

bool is_custom(const std::string& name) {
  return name.rfind(kCustomPrefix, 0) == 0;
}

bool has_batch_norm_layers(const std::string& model) {
  return model == builtin_model_names().name(BuiltinModel::CnnBn);
}

bool is_sequence_model(const std::string& model) {
  return model == builtin_model_names().name(BuiltinModel::Gpt);
}

const NameTable<TaskKind>& task_names() {
  static const NameTable<TaskKind> table{"--task",
                                         "--task",
                                         {{TaskKind::Auto, "auto"},
                                          {TaskKind::Classify, "classify"},
                                          {TaskKind::Lm, "lm"},
                                          {TaskKind::Regress, "regress"}}};
  return table;
}

const NameTable<SequenceMode>& sequence_mode_names() {
  static const NameTable<SequenceMode> table{"--sequences",
                                             "--sequences",
                                             {{SequenceMode::Auto, "auto"},
                                              {SequenceMode::Documents, "documents"},
                                              {SequenceMode::Packed, "packed"}}};
  return table;
}

const NameTable<TokenDtype>& token_dtype_names() {
  static const NameTable<TokenDtype> table{
      "--token-dtype",
      "--token-dtype",
      {{TokenDtype::Auto, "auto"}, {TokenDtype::Uint16, "uint16"}, {TokenDtype::Uint32, "uint32"}}};
  return table;
}

const NameTable<OptimizerKind>& optimizer_names() {
  static const NameTable<OptimizerKind> table{"optimizer",
                                              "--optimizer",
                                              {{OptimizerKind::Sgd, "sgd"},
                                               {OptimizerKind::AdamW, "adamw"},
                                               {OptimizerKind::Lars, "lars"},
                                               {OptimizerKind::Lamb, "lamb"}}};
  return table;
}

bool is_adaptive(OptimizerKind kind) {
  return kind == OptimizerKind::AdamW || kind == OptimizerKind::Lamb;
}

const NameTable<BatchNormMode>& batch_norm_mode_names() {
  static const NameTable<BatchNormMode> table{"--bn-mode",
                                              "--bn-mode",
                                              {{BatchNormMode::Micro, "micro"},
                                               {BatchNormMode::Window, "window"},
                                               {BatchNormMode::Frozen, "frozen"}}};
  return table;
}

const NameTable<NormKind>& norm_names() {
  static const NameTable<NormKind> table{
      "--norm", "--norm", {{NormKind::Batch, "batch"}, {NormKind::Group, "group"}}};
  return table;
}

const NameTable<Precision>& precision_names() {
  static const NameTable<Precision> table{
      "--precision", "--precision", {{Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}}};
  return table;
}

const NameTable<ProgressMode>& progress_mode_names() {
  static const NameTable<ProgressMode> table{"--progress",
                                             "--progress",
                                             {{ProgressMode::Auto, "auto"},
                                              {ProgressMode::Bar, "bar"},
                                              {ProgressMode::Lines, "lines"},
                                              {ProgressMode::Off, "off"}}};
  return table;
}

}  // namespace bigbatch
