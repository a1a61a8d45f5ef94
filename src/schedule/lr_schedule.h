#pragma once
// The learning rate as a pure function of the update index (llm.c's schedulers, nanoGPT's
// get_lr): batch-size scaling, warmup and decay compose, and resuming needs only `step`.
//
//   peak      = base_lr x scale(global_batch / reference_batch)   (none | linear | sqrt)
//   step < W  : lr = peak x (f + (1 - f) x (step + 1) / W)        (f = warmup_start_factor)
//   step >= W : lr = peak x decay(p),  p = (step - W) / (T - W)   (constant|cosine|linear|step)
//
// Step 0 of a warmup of W updates therefore trains at peak x (f + (1 - f) / W), never at 0,
// and the last warmup update (W - 1) trains at the peak.
//
//   LrScheduleConfig c;  c.base_lr = 0.05;  c.reference_batch = 64;
//   c.scaling = LrScaling::Linear;  c.global_batch = 1024;  c.warmup_updates = 100;
//   LrSchedule schedule(c);
//   double lr = schedule.lr_at(step);
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/name_table.h"

namespace bigbatch {

// Auto is a configuration value only: resolved per optimizer (resolve_lr_scaling) before a
// schedule is built — linear for LARS, the square root for the others (what held for SGD here;
// Malladi et al. 2022 for Adam-type optimizers). AdaScale is no fixed rule: the rate stays the
// reference batch's and each update multiplies it by a measured gain (schedule/adascale.h), so the
// schedule's updates are counted at the reference batch.
enum class LrScaling { None, Linear, Sqrt, Auto, AdaScale };
// RangeTest is `bigbatch lr-find`'s: the rate rises exponentially over the run, from peak x
// min_lr_factor at the first update to the peak at the last (no warmup).
enum class ScheduleKind { Constant, Cosine, Linear, Step, RangeTest };

const NameTable<LrScaling>& lr_scaling_names();
const NameTable<ScheduleKind>& schedule_kind_names();
inline const char* to_string(LrScaling scaling) {
  return lr_scaling_names().name(scaling);
}
inline const char* to_string(ScheduleKind kind) {
  return schedule_kind_names().name(kind);
}

// The batch-size scaling rule alone: base_lr at reference_batch -> rate at global_batch.
// AdaScale returns base_lr: its gain is applied per update.
double scale_lr(double base_lr, int64_t reference_batch, int64_t global_batch, LrScaling scaling);

// Auto -> Linear for LARS (`layer_wise_trust`: its trust ratio bounds each layer's step, and
// You et al. scale it linearly), Sqrt for every other optimizer: Malladi et al.'s rule for
// Adam-type ones, and for SGD what held here — scaling the default job's rate, the linear rule
// diverged at 4x the tuned batch for the built-in cnn while the square-root rule held for every
// built-in model (bench/lr_limits_bench.py, docs/benchmarks.md). Any other rule as given.
LrScaling resolve_lr_scaling(LrScaling scaling, bool layer_wise_trust);

// Malladi et al.'s square-root rule for Adam in full: with the batch multiplied by kappa, besides
// lr x sqrt(kappa), beta_i -> 1 - kappa (1 - beta_i) and eps -> eps / sqrt(kappa), so that the
// optimizer's averaging horizon stays the same in samples. Throws bigbatch::Error (Config) when a
// beta would leave [0, 1).
struct AdamHyperparameters {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};
AdamHyperparameters scale_adam_hyperparameters(const AdamHyperparameters& at_reference,
                                               double kappa);
// "beta1 0.8, beta2 0.998, eps 7.07107e-09"
std::string describe(const AdamHyperparameters& adam);
// The largest global batch the adjustment keeps both betas in [0, 1) at: a beta reaches 0 at
// kappa = 1 / (1 - beta), so beta1 0.9 bounds it at 10x `reference_batch`.
int64_t largest_adam_adjusted_batch(const AdamHyperparameters& at_reference,
                                    int64_t reference_batch);

struct LrScheduleConfig {
  double base_lr = 0.1;
  int64_t reference_batch = 0;  // 0: the global batch, i.e. no scaling
  int64_t global_batch = 1;
  LrScaling scaling = LrScaling::None;
  // Where the reference batch came from, e.g. "the default rate's batch" (describe_scaling).
  std::string reference_note;
  // LARS: a layer-wise trust ratio bounds each step, so the linear rule is its own.
  bool layer_wise_trust = false;
  // Plain SGD, the optimizer the rules' limits were measured with (warnings() says them).
  bool plain_sgd = false;
  int64_t warmup_updates = 0;
  double warmup_start_factor = 0.0;
  ScheduleKind kind = ScheduleKind::Constant;
  int64_t total_updates = 1;        // length of the run, for cosine and linear decay
  double min_lr_factor = 0.0;       // cosine and linear end at peak x min_lr_factor
  std::vector<int64_t> milestones;  // step decay: update indices where lr *= gamma
  double gamma = 0.1;
  // --adam-sqrt-adjust: AdamW's betas and eps as configured, i.e. at the reference batch; every
  // global batch then trains at its own (adam_at). Unset: they stay as configured.
  std::optional<AdamHyperparameters> adam_at_reference;
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleConfig& config);

  double lr_at(int64_t step) const { return lr_at_position(double(step)); }
  // The same curve at a fractional position in updates: a run whose batch changes counts its
  // schedule in samples / reference batch (schedule/batch_schedule.h).
  double lr_at_position(double position) const;
  double peak_lr() const { return peak_lr_; }
  const LrScheduleConfig& config() const { return config_; }
  // AdamW's betas and eps for an update of `global_batch` under --adam-sqrt-adjust (unset
  // without): a function of the batch alone, like the rule's factor in the rate, so a batch that
  // changes (a ramp, the automatic batch, a test's doubled branch) changes them with it.
  std::optional<AdamHyperparameters> adam_at(int64_t global_batch) const;

  // "lr 0.05 @ 64 -> 0.8 @ 1024 (linear)"
  std::string describe_scaling() const;
  // Configurations that are legal but known to train badly or not as written (the linear rule
  // past 1024 without warmup, a warmup as long as the run, a milestone past its end); each
  // text explains why.
  std::vector<std::string> warnings() const;

 private:
  LrScheduleConfig config_;
  double peak_lr_;
};

}  // namespace bigbatch
