#include "flags.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "batching/batch_plan.h"
#include "core/text.h"

namespace bigbatch::cli {

namespace {

// "(default: 0.05)", from a default-constructed TrainConfig, so help never drifts from code.
std::string default_note(const OptionSpec& spec) {
  const auto value = spec.get(TrainConfig{});
  if (!value || spec.is_switch())
    return {};
  const std::string text = std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, double>) {
          return format_double(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(v);
        } else {
          std::vector<std::string> parts;
          for (const auto& element : v) {
            if constexpr (std::is_same_v<std::decay_t<decltype(element)>, std::string>) {
              parts.push_back(element);
            } else {
              parts.push_back(std::to_string(element));
            }
          }
          return join(parts, ",");
        }
      },
      *value);
  return text.empty() ? std::string() : " (default: " + text + ")";
}

// `train --help` in sections, as torchrun and LightningCLI print theirs (issue 20); an option
// not listed here lands in "Other", which a test keeps empty.
std::string help_group(const std::string& name) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"Model",
       {"model", "hidden", "bn-mode", "norm", "no-bn-momentum-correction", "layers", "d-model",
        "heads", "dropout", "recompute", "init-weights", "precision"}},
      {"Data",
       {"dataset", "task", "doc-separator", "text-field", "sequences", "tokenizer", "token-dtype",
        "vocab-size", "eot-id", "pixel-mean", "pixel-std", "seq-len", "train-subset", "val-size",
        "seed", "no-shuffle", "prefetch"}},
      {"Batch",
       {"global-batch", "global-batch-schedule", "max-global-batch", "growth-threshold",
        "growth-predict-at", "update-cost", "growth-test", "growth-tolerance", "growth-confidence",
        "growth-control", "growth-test-budget", "growth-holdout", "micro-batch", "accum-steps",
        "micro-batch-tokens", "last-window", "strict-batch"}},
      {"Optimisation and learning rate", {"optimizer",        "lr",
                                          "lr-ref-batch",     "lr-scaling",
                                          "adam-sqrt-adjust", "no-adam-sqrt-adjust",
                                          "momentum",         "nesterov",
                                          "no-nesterov",      "weight-decay",
                                          "clip-norm",        "label-smoothing",
                                          "adam-beta1",       "adam-beta2",
                                          "adam-eps",         "lars-trust",
                                          "warmup",           "warmup-start-factor",
                                          "schedule",         "min-lr-factor",
                                          "schedule-length",  "step-milestones",
                                          "step-gamma",       "max-bad-updates",
                                          "spike-factor"}},
      {"Run length",
       {"epochs", "max-updates", "target", "target-accuracy", "eval-every", "early-stop",
        "patience", "min-delta"}},
      {"Device, memory and CPU",
       {"device", "memory-budget", "fit-margin", "threads", "keep-denormals"}},
      {"Checkpoints and resume",
       {"checkpoint-every", "keep-checkpoints", "resume", "discard-newer"}},
      {"Distributed", {"dist-timeout", "bucket-mb", "shard-optimizer", "no-shard-optimizer"}},
      {"Output",
       {"out", "save-weights", "keep-best", "progress", "no-noise-scale", "noise-gradient",
        "no-tensorboard"}},
  };
  for (const auto& [group, names] : groups) {
    if (std::find(names.begin(), names.end(), name) != names.end())
      return group;
  }
  return "Other";
}

// Options whose default is no value: what happens when they are not given.
std::string unset_note(const std::string& name) {
  if (name == "global-batch")
    return " (default: " + std::to_string(kDefaultGlobalBatchSize) + ")";
  if (name == "micro-batch")
    return " (default: " + std::to_string(kDefaultMicroBatchSize) + ", or derived)";
  if (name == "accum-steps")
    return " (default: derived from the other two)";
  if (name == "max-updates")
    return " (default: none; --epochs decides)";
  if (name == "eval-every")
    return " (default: none; every epoch's end evaluates)";
  if (name == "checkpoint-every")
    return " (default: none; one at the end of a resumed run)";
  if (name == "schedule-length")
    return " (default: the run's length)";
  return {};
}

}  // namespace

void register_options(CLI::App& command, unsigned mask, FlagValues& values,
                      const std::set<std::string>& skip) {
  for (const auto& spec : option_table()) {
    if (!(spec.commands & mask) || skip.count(spec.name))
      continue;
    const std::string flag = "--" + spec.name;
    if (spec.is_switch()) {
      values.handles[spec.name] = command.add_flag(flag, values.switches[spec.name], spec.help);
    } else {
      // A flag given twice takes its last value, as in most command lines (and as a flag
      // overriding --config does); the command line warns that it was repeated.
      const std::string note = default_note(spec);
      values.handles[spec.name] =
          command
              .add_option(flag, values.text[spec.name],
                          spec.help + (note.empty() ? unset_note(spec.name) : note))
              ->type_name(spec.value_hint)
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    values.handles[spec.name]->group(help_group(spec.name));
  }
}

void apply_flags(TrainConfig& config, unsigned mask, const FlagValues& values) {
  for (const auto& spec : option_table()) {
    if (!(spec.commands & mask) || !values.given(spec.name))
      continue;
    apply_option(config, spec, spec.is_switch() ? "true" : values.text.at(spec.name));
  }
}

TrainConfig configured(const std::string& config_path, unsigned mask, const FlagValues& values) {
  TrainConfig config;
  if (!config_path.empty())
    load_toml_config(config, config_path);
  apply_flags(config, mask, values);
  return config;
}

CLI::Option* add_config_option(CLI::App& command, std::string& path, const std::string& help) {
  return command.add_option("--config", path, help)->type_name("FILE");
}

}  // namespace bigbatch::cli
