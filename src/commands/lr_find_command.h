#pragma once
// `bigbatch lr-find`: the learning-rate range test at the effective batch the run will use. A
// short run of train's configuration — the same global batch, micro-batch, accumulation and
// ranks — whose rate rises exponentially from --lr-min to --lr-max (--schedule range-test, no
// scaling, no warmup), then the curve read as report/lr_range.h says: a suggested --lr, tuned at
// that global batch, with the rule that produced it. The run directory keeps what a run keeps
// (metrics.jsonl, TensorBoard events, report.html) and the test's own lr_find.json and
// lr_find.html (the loss against the rate, the suggestion marked).
#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace bigbatch {

struct LrFindOptions {
  double lr_min = 1e-6;
  double lr_max = 1.0;
  int64_t updates = 100;
  // The options the user gave by name (flags, or the Python package's keywords): one the test
  // sets itself is refused even at its default value (--schedule cosine).
  std::vector<std::string> given{};
};

struct LrFindReport {
  std::string run_dir;
  std::string text;  // what the terminal shows
  std::string json;  // lr_find.json's content
};

struct CustomProblem;  // train/custom_problem.h

// `config` is train's, as given (its --lr, --warmup or schedule flags are the test's own and
// refused); Error for bad options. A range that diverges ends the run there and is read.
// `problem`: a program's model and data, trained as run_training trains them (give a factory
// of copies to leave the program's own module as it was).
LrFindReport run_lr_find(const TrainConfig& config, const LrFindOptions& options,
                         const CustomProblem* problem = nullptr);

}  // namespace bigbatch
