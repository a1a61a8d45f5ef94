#include "config/modes.h"

namespace bigbatch {

// Function-local statics: built on first use, so no static initialisation order to depend on.

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

const NameTable<OptimizerKind>& optimizer_names() {
  static const NameTable<OptimizerKind> table{"optimizer",
                                              "--optimizer",
                                              {{OptimizerKind::Sgd, "sgd"},
                                               {OptimizerKind::AdamW, "adamw"},
                                               {OptimizerKind::Lars, "lars"},
                                               {OptimizerKind::Lamb, "lamb"}}};
  return table;
}

const NameTable<Precision>& precision_names() {
  static const NameTable<Precision> table{
      "--precision", "--precision", {{Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}}};
  return table;
}

}  // namespace bigbatch
