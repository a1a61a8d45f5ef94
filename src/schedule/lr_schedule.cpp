#include "schedule/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {
std::string milestone_list(const std::vector<int64_t>& milestones) {
  std::vector<std::string> parts;
  for (int64_t m : milestones)
    parts.push_back(std::to_string(m));
  return join(parts, ", ");
}
}  // namespace

const NameTable<LrScaling>& lr_scaling_names() {
  static const NameTable<LrScaling> table{"learning-rate scaling rule",
                                          "--lr-scaling",
                                          {{LrScaling::Auto, "auto"},
                                           {LrScaling::None, "none"},
                                           {LrScaling::Linear, "linear"},
                                           {LrScaling::Sqrt, "sqrt"},
                                           {LrScaling::AdaScale, "adascale"}}};
  return table;
}

const NameTable<ScheduleKind>& schedule_kind_names() {
  static const NameTable<ScheduleKind> table{"schedule",
                                             "--schedule",
                                             {{ScheduleKind::Constant, "constant"},
                                              {ScheduleKind::Cosine, "cosine"},
                                              {ScheduleKind::Linear, "linear"},
                                              {ScheduleKind::Step, "step"},
                                              {ScheduleKind::RangeTest, "range-test"}}};
  return table;
}

double scale_lr(double base_lr, int64_t reference_batch, int64_t global_batch, LrScaling scaling) {
  const double ratio = double(global_batch) / double(reference_batch);
  switch (scaling) {
    case LrScaling::None:
    case LrScaling::AdaScale:
      return base_lr;
    case LrScaling::Linear:
      return base_lr * ratio;
    case LrScaling::Sqrt:
      return base_lr * std::sqrt(ratio);
    case LrScaling::Auto:
      break;
  }
  BB_INTERNAL_ASSERT(false, "the auto scaling rule must be resolved before it is applied");
}

LrScaling resolve_lr_scaling(LrScaling scaling, bool layer_wise_trust) {
  if (scaling != LrScaling::Auto)
    return scaling;
  return layer_wise_trust ? LrScaling::Linear : LrScaling::Sqrt;
}

namespace {
// 1 - kappa (1 - beta), with a result within rounding of 0 made 0: 1 - 0.95 is not exactly 0.05 in
// binary, so beta2 0.95 at 20x would otherwise come out at -9e-16 and be refused.
double adjusted_beta(double beta, double kappa) {
  const double value = 1 - kappa * (1 - beta);
  return std::abs(value) < 1e-12 ? 0.0 : value;
}
}  // namespace

AdamHyperparameters scale_adam_hyperparameters(const AdamHyperparameters& at_reference,
                                               double kappa) {
  AdamHyperparameters scaled;
  scaled.beta1 = adjusted_beta(at_reference.beta1, kappa);
  scaled.beta2 = adjusted_beta(at_reference.beta2, kappa);
  scaled.eps = at_reference.eps / std::sqrt(kappa);
  for (const auto& [name, value, original] :
       {std::tuple{"beta1", scaled.beta1, at_reference.beta1},
        std::tuple{"beta2", scaled.beta2, at_reference.beta2}}) {
    if (!(value >= 0 && value < 1)) {
      throw Error(ErrorKind::Config,
                  std::string("the square-root rule's Adam adjustment takes ") + name + " " +
                      format_significant(original) + " to " + format_significant(value) +
                      " for a batch " + format_significant(kappa) + "x the reference",
                  std::string("use a --lr-ref-batch closer to the global batch, a larger --adam-") +
                      name + ", or drop --adam-sqrt-adjust");
    }
  }
  return scaled;
}

std::string describe(const AdamHyperparameters& adam) {
  return "beta1 " + format_significant(adam.beta1) + ", beta2 " + format_significant(adam.beta2) +
         ", eps " + format_significant(adam.eps);
}

int64_t largest_adam_adjusted_batch(const AdamHyperparameters& at_reference,
                                    int64_t reference_batch) {
  const double smaller = std::min(at_reference.beta1, at_reference.beta2);
  auto largest =
      static_cast<int64_t>(std::floor(double(reference_batch) / (1 - smaller) * (1 + 1e-12)));
  // The same arithmetic as scale_adam_hyperparameters, so the bound is one it accepts.
  while (largest > 0 && adjusted_beta(smaller, double(largest) / double(reference_batch)) < 0)
    --largest;
  return largest;
}

LrSchedule::LrSchedule(const LrScheduleConfig& config) : config_(config) {
  if (config_.reference_batch == 0)
    config_.reference_batch = config_.global_batch;
  if (!(config_.base_lr >= 0)) {
    throw Error(ErrorKind::Config,
                "--lr must be zero or positive, got " + format_double(config_.base_lr),
                "pass a learning rate such as --lr 0.1");
  }
  if (config_.reference_batch < 0) {
    throw Error(ErrorKind::Config,
                "--lr-ref-batch must be positive, got " + std::to_string(config_.reference_batch),
                "pass the batch size the base --lr was tuned at, e.g. --lr-ref-batch 256");
  }
  if (config_.warmup_start_factor < 0 || config_.warmup_start_factor > 1) {
    throw Error(ErrorKind::Config,
                "--warmup-start-factor must be in [0, 1], got " +
                    format_double(config_.warmup_start_factor),
                "use 0 to start the warmup from zero, or e.g. 0.1");
  }
  if (config_.min_lr_factor < 0 || config_.min_lr_factor > 1) {
    throw Error(ErrorKind::Config,
                "--min-lr-factor must be in [0, 1], got " + format_double(config_.min_lr_factor),
                "use e.g. --min-lr-factor 0.01");
  }
  if (config_.kind == ScheduleKind::RangeTest &&
      (config_.min_lr_factor <= 0 || config_.warmup_updates > 0)) {
    throw Error(ErrorKind::Config,
                "--schedule range-test rises from --lr x --min-lr-factor to --lr over the run, "
                "which needs a positive --min-lr-factor and no warmup",
                "run it as bigbatch lr-find --lr-min LOW --lr-max HIGH");
  }
  if (config_.gamma <= 0) {
    throw Error(ErrorKind::Config,
                "--step-gamma must be positive, got " + format_double(config_.gamma),
                "use e.g. --step-gamma 0.1");
  }
  for (size_t i = 1; i < config_.milestones.size(); ++i) {
    if (config_.milestones[i] <= config_.milestones[i - 1]) {
      throw Error(ErrorKind::Config,
                  "--step-milestones must increase; in updates they are " +
                      milestone_list(config_.milestones),
                  "list them in order, e.g. --step-milestones 3e,6e");
    }
  }
  peak_lr_ =
      scale_lr(config_.base_lr, config_.reference_batch, config_.global_batch, config_.scaling);
}

double LrSchedule::lr_at_position(double step) const {
  if (config_.kind == ScheduleKind::RangeTest) {
    const double progress =
        std::clamp(step / double(std::max<int64_t>(1, config_.total_updates - 1)), 0.0, 1.0);
    return peak_lr_ * std::pow(config_.min_lr_factor, 1.0 - progress);
  }
  const int64_t warmup = config_.warmup_updates;
  if (step < double(warmup)) {
    const double f = config_.warmup_start_factor;
    return peak_lr_ * (f + (1.0 - f) * std::min(1.0, (step + 1) / double(warmup)));
  }
  const double floor_lr = peak_lr_ * config_.min_lr_factor;
  const int64_t decay_span = std::max<int64_t>(1, config_.total_updates - warmup);
  const double progress = std::clamp((step - double(warmup)) / double(decay_span), 0.0, 1.0);
  switch (config_.kind) {
    case ScheduleKind::Constant:
      return peak_lr_;
    case ScheduleKind::Cosine:
      return floor_lr + (peak_lr_ - floor_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
    case ScheduleKind::Linear:
      return peak_lr_ + (floor_lr - peak_lr_) * progress;
    case ScheduleKind::RangeTest:  // above
      return peak_lr_;
    case ScheduleKind::Step: {
      const auto passed =
          std::upper_bound(config_.milestones.begin(), config_.milestones.end(), step,
                           [](double s, int64_t milestone) { return s < double(milestone); }) -
          config_.milestones.begin();
      return peak_lr_ * std::pow(config_.gamma, double(passed));
    }
  }
  return peak_lr_;
}

std::optional<AdamHyperparameters> LrSchedule::adam_at(int64_t global_batch) const {
  if (!config_.adam_at_reference)
    return std::nullopt;
  return scale_adam_hyperparameters(*config_.adam_at_reference,
                                    double(global_batch) / double(config_.reference_batch));
}

std::string LrSchedule::describe_scaling() const {
  if (config_.scaling == LrScaling::AdaScale) {
    return "lr " + format_double(config_.base_lr) + " @ " +
           std::to_string(config_.reference_batch) + " x AdaScale gain in [1, " +
           format_significant(double(config_.global_batch) / double(config_.reference_batch)) +
           "] @ " + std::to_string(config_.global_batch) + " (schedule in scale-invariant updates" +
           ")";
  }
  return "lr " + format_double(config_.base_lr) + " @ " + std::to_string(config_.reference_batch) +
         (config_.reference_note.empty() ? std::string() : " (" + config_.reference_note + ")") +
         " -> " + format_significant(peak_lr_) + " @ " + std::to_string(config_.global_batch) +
         " (" + to_string(config_.scaling) + ")";
}

std::vector<std::string> LrSchedule::warnings() const {
  std::vector<std::string> out;
  // Only a rate that was scaled up: one tuned at this very batch is the user's own choice.
  const bool scaled_up =
      config_.reference_batch > 0 && config_.reference_batch < config_.global_batch;
  if (config_.scaling == LrScaling::Linear && config_.global_batch > 1024 &&
      config_.warmup_updates == 0 && scaled_up) {
    out.push_back(
        "global batch " + std::to_string(config_.global_batch) +
        " with the linear scaling rule and no warmup: the scaled rate " +
        format_significant(peak_lr_) +
        " applies from the first update, while the weights are random and the gradients large "
        "and fast-changing; past ~1024 this diverges or costs accuracy (Goyal et al. 2017). "
        "Add a gradual warmup, e.g. --warmup 5e, or use --lr-scaling sqrt");
  }
  // How far the rules held, scaling the default job's rate from 256 for each built-in image
  // model over 2 epochs (bench/lr_limits_bench.py, docs/benchmarks.md): at 4x the linear rule
  // diverged for the cnn and trailed the square-root rule by 2.2-3.4 points for cnn-bn and
  // cnn-gn; past 4x no rule beat the unscaled rate for any of them (the square-root rule
  // diverged for the cnn at 16x and fell to 19% for cnn-bn). (The gpt with AdamW, from a rate
  // below its best, took the linear rule to 16x: a measured rate, lr-find's, is the remedy.)
  const double factor =
      scaled_up ? double(config_.global_batch) / double(config_.reference_batch) : 1.0;
  const std::string scaled =
      "the rate " + format_significant(config_.base_lr) + " @ " +
      std::to_string(config_.reference_batch) + " to " + format_significant(peak_lr_) + " @ " +
      std::to_string(config_.global_batch) + " (" + format_significant(factor, 3) + "x the batch)";
  if (config_.scaling == LrScaling::Linear && config_.plain_sgd && factor > 2) {
    out.push_back("the linear rule takes " + scaled +
                  ": from the default job's rate it diverged at 4x for the built-in cnn, where "
                  "the square-root rule held (docs/benchmarks.md, learning-rate limits). Use "
                  "--lr-scaling sqrt unless the linear rule is known to hold this far, or "
                  "measure a rate at this batch with bigbatch lr-find");
  } else if ((config_.scaling == LrScaling::Linear || config_.scaling == LrScaling::Sqrt) &&
             config_.plain_sgd && factor > 4) {
    out.push_back("the " + std::string(to_string(config_.scaling)) + " rule takes " + scaled +
                  ": past 4x no rule beat the unscaled rate for the built-in image models with "
                  "SGD here (the square-root rule diverged at 16x for the cnn; docs/benchmarks.md, "
                  "learning-rate limits). Measure a rate at this batch (bigbatch lr-find, "
                  "bigbatch sweep), grow the batch during the run (--global-batch-schedule, "
                  "--global-batch auto), or let --lr-scaling adascale measure the gain");
  }
  if (config_.warmup_updates >= config_.total_updates && config_.warmup_updates > 0) {
    out.push_back("the warmup (" + std::to_string(config_.warmup_updates) +
                  " updates) is as long as the run (" + std::to_string(config_.total_updates) +
                  " updates): the rate never reaches its peak " + format_significant(peak_lr_) +
                  ". Shorten --warmup or train longer");
  }
  if (config_.kind == ScheduleKind::Step && !config_.milestones.empty() &&
      config_.milestones.back() >= config_.total_updates) {
    out.push_back("the step milestone at update " + std::to_string(config_.milestones.back()) +
                  " is past the run's " + std::to_string(config_.total_updates) +
                  " updates and never applies");
  }
  return out;
}

}  // namespace bigbatch
