#include "models/model_choices.h"

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
  return name.rfind(kCustomPrefix, 0) == 0 || name.rfind(kPythonPrefix, 0) == 0;
}

std::string custom_origin(const std::string& name) {
  return name.rfind(kPythonPrefix, 0) == 0
             ? "a Python program through the bigbatch package (docs/python.md)"
             : "a C++ program through the bigbatch library (docs/library.md)";
}

bool has_batch_norm_layers(const std::string& model) {
  return model == builtin_model_names().name(BuiltinModel::CnnBn);
}

bool is_sequence_model(const std::string& model) {
  return model == builtin_model_names().name(BuiltinModel::Gpt);
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

}  // namespace bigbatch
