#include "config/option_table.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "core/files.h"
#include "core/name_table.h"
#include "core/text.h"
#include "schedule/batch_schedule.h"

namespace bigbatch {

namespace {

[[noreturn]] void bad_value(const std::string& option, const std::string& text,
                            const std::string& expected) {
  throw Error(ErrorKind::Config, "--" + option + " expects " + expected + ", got '" + text + "'",
              "see 'bigbatch train --help'");
}

int64_t to_int(const std::string& option, const std::string& text) {
  const auto value = parse_int(text);
  if (!value)
    bad_value(option, text, "an integer");
  return *value;
}

double to_double(const std::string& option, const std::string& text) {
  const auto value = parse_double(text);
  if (!value)
    bad_value(option, text, "a number");
  return *value;
}

bool to_bool(const std::string& option, const std::string& text) {
  if (text == "true" || text == "1")
    return true;
  if (text == "false" || text == "0")
    return false;
  bad_value(option, text, "true or false");
}

std::vector<int64_t> to_int_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> values;
  for (const auto& part : split(text, ','))
    values.push_back(to_int(option, part));
  return values;
}

std::vector<std::string> interval_strings(const std::vector<Interval>& intervals) {
  std::vector<std::string> out;
  for (const auto& i : intervals)
    out.push_back(i.to_string());
  return out;
}

// Row builders: each keeps the per-type parsing in one place.
OptionSpec int_option(std::string name, std::string help, int64_t TrainConfig::*field,
                      unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), "N", commands, nullptr, nullptr};
  s.set = [name, field](TrainConfig& c, const std::string& t) { c.*field = to_int(name, t); };
  s.get = [field](const TrainConfig& c) -> std::optional<ConfigValue> { return c.*field; };
  return s;
}

OptionSpec optional_int_option(std::string name, std::string help,
                               std::optional<int64_t> TrainConfig::*field,
                               unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), "N", commands, nullptr, nullptr};
  s.set = [name, field](TrainConfig& c, const std::string& t) { c.*field = to_int(name, t); };
  s.get = [field](const TrainConfig& c) -> std::optional<ConfigValue> {
    if (!(c.*field))
      return std::nullopt;
    return *(c.*field);
  };
  return s;
}

// "N|auto": a whole number, or auto (the value then measured or decided by the run).
OptionSpec int_or_auto_option(std::string name, std::string help,
                              std::optional<int64_t> TrainConfig::*field,
                              bool TrainConfig::*is_auto, unsigned commands) {
  OptionSpec s{name, std::move(help), "N|auto", commands, nullptr, nullptr};
  s.set = [name, field, is_auto](TrainConfig& c, const std::string& text) {
    c.*is_auto = trim(text) == "auto";
    (c.*field).reset();
    if (!(c.*is_auto))
      c.*field = to_int(name, text);
  };
  s.get = [field, is_auto](const TrainConfig& c) -> std::optional<ConfigValue> {
    if (c.*is_auto)
      return std::string("auto");
    if (!(c.*field))
      return std::nullopt;
    return *(c.*field);
  };
  return s;
}

OptionSpec double_option(std::string name, std::string help, double TrainConfig::*field,
                         unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), "X", commands, nullptr, nullptr};
  s.set = [name, field](TrainConfig& c, const std::string& t) { c.*field = to_double(name, t); };
  s.get = [field](const TrainConfig& c) -> std::optional<ConfigValue> { return c.*field; };
  return s;
}

OptionSpec switch_option(std::string name, std::string help, bool TrainConfig::*field,
                         bool value_when_set, unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), "", commands, nullptr, nullptr};
  s.set = [name, field, value_when_set](TrainConfig& c, const std::string& t) {
    c.*field = to_bool(name, t) ? value_when_set : !value_when_set;
  };
  s.get = [field, value_when_set](const TrainConfig& c) -> std::optional<ConfigValue> {
    return c.*field == value_when_set;
  };
  return s;
}

// A switch pair over a setting whose default depends on others: unset until one is given.
OptionSpec optional_switch_option(std::string name, std::string help,
                                  std::optional<bool> TrainConfig::*field, bool value_when_set,
                                  unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), "", commands, nullptr, nullptr};
  s.set = [name, field, value_when_set](TrainConfig& c, const std::string& t) {
    c.*field = to_bool(name, t) ? value_when_set : !value_when_set;
  };
  s.get = [field, value_when_set](const TrainConfig& c) -> std::optional<ConfigValue> {
    if (!(c.*field))
      return std::nullopt;
    return *(c.*field) == value_when_set;
  };
  s.negates_another = !value_when_set;
  return s;
}

OptionSpec string_option(std::string name, std::string help, std::string value_hint,
                         std::string TrainConfig::*field, unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), std::move(value_hint), commands, nullptr, nullptr};
  s.set = [field](TrainConfig& c, const std::string& t) { c.*field = t; };
  s.get = [field](const TrainConfig& c) -> std::optional<ConfigValue> {
    if ((c.*field).empty())
      return std::nullopt;
    return c.*field;
  };
  return s;
}

// The value hint ("keep|drop"), parsing and rendering all come from the enum's name table.
template <typename Enum>
OptionSpec enum_option(std::string name, std::string help, Enum TrainConfig::*field,
                       const NameTable<Enum>& (*names)(), unsigned commands = kTrainCommand) {
  OptionSpec s{name, std::move(help), join(names().names(), "|"), commands, nullptr, nullptr};
  s.set = [field, names](TrainConfig& c, const std::string& t) { c.*field = names().parse(t); };
  s.get = [field, names](const TrainConfig& c) -> std::optional<ConfigValue> {
    return std::string(names().name(c.*field));
  };
  return s;
}

std::vector<OptionSpec> build_table() {
  const unsigned both = kTrainCommand | kPlanCommand;
  // What `bigbatch fit` measures: the model, its input, the optimizer's state, the threads.
  const unsigned train_and_fit = kTrainCommand | kFitCommand;
  // What decides the data, and so the epoch the plan divides: `bigbatch plan` loads it.
  const unsigned data = kTrainCommand | kFitCommand | kPlanCommand;
  std::vector<OptionSpec> t;
  t.push_back(string_option("model",
                            "model: mlp, cnn, cnn-bn (BatchNorm) or cnn-gn (GroupNorm) for "
                            "images; gpt (a decoder-only transformer) for text",
                            "NAME", &TrainConfig::model, train_and_fit));
  {
    OptionSpec s{"hidden", "mlp hidden layer widths, comma-separated",
                 "W1,W2",  train_and_fit,
                 nullptr,  nullptr};
    s.set = [](TrainConfig& c, const std::string& text) { c.hidden = to_int_list("hidden", text); };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> { return c.hidden; };
    s.is_list = true;
    t.push_back(s);
  }
  t.push_back(enum_option("bn-mode",
                          "BatchNorm statistics under accumulation: micro (per micro-batch, "
                          "ghost batch norm), window (pooled over the accumulation window: "
                          "exact normalisation, one statistics pass per BatchNorm layer) or "
                          "frozen (running statistics)",
                          &TrainConfig::bn_mode, &batch_norm_mode_names));
  t.push_back(enum_option("norm",
                          "batch keeps BatchNorm layers; group rewrites them as GroupNorm "
                          "(per-sample: exact under accumulation)",
                          &TrainConfig::norm, &norm_names));
  t.push_back(switch_option("no-bn-momentum-correction",
                            "update BatchNorm's running statistics with the plain momentum at "
                            "every micro-step (default: corrected, so their horizon is the same "
                            "in updates at any accumulation)",
                            &TrainConfig::bn_momentum_correction, false));
  t.push_back(string_option("dataset",
                            "fashion-mnist, idx:DIR for any directory of MNIST-format files, "
                            "npy:DIR (x_train.npy, y_train.npy, ...) or npy:FILE.npz; "
                            "text:PATH (a text file or directory), jsonl:FILE (one JSON object "
                            "per line) or tokens:PATH (Megatron .bin/.idx, llm.c shards, "
                            "headerless .bin; a file, prefix or directory) for a language model",
                            "NAME", &TrainConfig::dataset, data));
  t.push_back(enum_option("task",
                          "what the mean is over: classify (samples: cross-entropy), regress "
                          "(samples: summed squared error, npy:DIR float targets) or lm "
                          "(next-token prediction: target tokens); auto takes the dataset's",
                          &TrainConfig::task, &task_names, data));
  t.push_back(string_option("doc-separator",
                            "text:PATH: the line that separates documents (fortune's %), blank "
                            "(blank lines) or line (one document per line)",
                            "LINE", &TrainConfig::doc_separator, data));
  t.push_back(string_option("text-field", "jsonl:FILE: the field that holds each document", "NAME",
                            &TrainConfig::text_field, data));
  t.push_back(enum_option("sequences",
                          "documents (each document a sample, padded per micro-batch to its "
                          "longest, cut at --seq-len) or packed (documents joined, cut into "
                          "blocks of --seq-len + 1 tokens); auto: documents for text, packed "
                          "for token files (as Megatron and llm.c load them)",
                          &TrainConfig::sequences, &sequence_mode_names, data));
  t.push_back(string_option("tokenizer",
                            "text:PATH, jsonl:FILE: byte (each byte a token, vocabulary 257) or "
                            "sentencepiece:FILE.model (a model spm_train wrote)",
                            "NAME", &TrainConfig::tokenizer, data));
  t.push_back(enum_option("token-dtype",
                          "tokens:PATH: the id type of headerless .bin files (nanoGPT: uint16); "
                          "auto reads it from the file's header (Megatron .idx, llm.c)",
                          &TrainConfig::token_dtype, &token_dtype_names, data));
  t.push_back(int_option("eot-id",
                         "tokens:PATH: the id that ends each document of a stream (llm.c shards, "
                         "nanoGPT .bin; GPT-2's end-of-text is 50256), so documents are samples "
                         "(--sequences auto then takes documents); -1: none",
                         &TrainConfig::eot_id, data));
  t.push_back(int_option("vocab-size",
                         "tokens:PATH: the vocabulary the model predicts over (every id must be "
                         "below it; 0: the largest id in the data + 1)",
                         &TrainConfig::vocab_size, data));
  t.push_back(double_option("pixel-mean",
                            "idx:DIR: images enter as (pixel / 255 - mean) / std; 0 (with "
                            "--pixel-std 0): measured on the training images",
                            &TrainConfig::pixel_mean, data));
  t.push_back(double_option("pixel-std", "idx:DIR: see --pixel-mean (0: measured)",
                            &TrainConfig::pixel_std, data));
  t.push_back(int_option("seq-len", "tokens per sample (and the gpt's positions)",
                         &TrainConfig::seq_len, data));
  t.push_back(int_option("layers", "gpt: transformer blocks", &TrainConfig::layers, train_and_fit));
  t.push_back(int_option("d-model", "gpt: width of the residual stream", &TrainConfig::d_model,
                         train_and_fit));
  t.push_back(int_option("heads", "gpt: attention heads (dividing --d-model)", &TrainConfig::heads,
                         train_and_fit));
  t.push_back(double_option("dropout", "gpt: dropout probability in training",
                            &TrainConfig::dropout, train_and_fit));
  t.push_back(switch_option("recompute",
                            "gpt: keep only each block's input in the forward pass and recompute "
                            "the block in the backward (activation checkpointing): less memory "
                            "per micro-batch for one more forward pass, the same weights bit for "
                            "bit",
                            &TrainConfig::recompute, true, train_and_fit));
  t.push_back(int_option("train-subset", "train on the first N training samples only (0: all)",
                         &TrainConfig::train_subset, data));
  t.push_back(int_option("val-size",
                         "hold out N training samples for validation (images: the last N; text: "
                         "N documents or blocks chosen by the seed, default 2% up to 1000)",
                         &TrainConfig::val_size, data));
  t.push_back(int_or_auto_option(
      "global-batch",
      "effective batch per update (micro x accumulation x ranks); auto: start at micro x "
      "accumulation (default 2 in one process, 1 over ranks) x ranks and double it while the "
      "measured noise scale and update cost say it pays (--max-global-batch, --growth-threshold, "
      "--update-cost)",
      &TrainConfig::global_batch, &TrainConfig::global_batch_auto,
      both | kFitCommand));  // fit searches up to a rank's share of it
  t.push_back(int_option("max-global-batch",
                         "--global-batch auto: the largest global batch it may grow to (0: 64 "
                         "times the start, at most the training set)",
                         &TrainConfig::max_global_batch, both));
  t.push_back(double_option("growth-threshold",
                            "--global-batch auto: the least predicted goodput gain a doubling "
                            "must promise (0.05: 5%)",
                            &TrainConfig::growth_threshold, both));
  t.push_back(enum_option("growth-predict-at",
                          "--global-batch auto: predict a doubling's goodput at the noise "
                          "scale's two-standard-error low end, so that a noisy estimate waits "
                          "(low), or at the estimate itself, so that the branch test decides as "
                          "soon as the estimate favours doubling (estimate)",
                          &TrainConfig::growth_predict_at, &growth_prediction_names, both));
  t.push_back(enum_option("growth-test",
                          "--global-batch auto: confirm each proposed doubling by training the "
                          "next samples at both batches from the same point and keeping the "
                          "doubled one only if its loss keeps up (branch), or take the "
                          "prediction alone (none)",
                          &TrainConfig::growth_test, &growth_test_names, both));
  t.push_back(double_option("growth-tolerance",
                            "--growth-test branch: how much less progress (relative) the doubled "
                            "branch may make over the test's samples and still be kept (0.1: "
                            "at least 90% of the current batch's)",
                            &TrainConfig::growth_tolerance, both));
  t.push_back(
      double_option("growth-confidence",
                    "--growth-test branch: keep the doubled branch only when its "
                    "difference plus this many standard errors (of the paired "
                    "per-sample differences) is within the bound (2; 0: the estimate alone)",
                    &TrainConfig::growth_confidence, both));
  t.push_back(double_option("growth-test-budget",
                            "--growth-test branch: the most the tests may throw away, as a "
                            "fraction of the samples trained (0.05: 5%); a test that could pass "
                            "it waits until the run has trained enough, and none runs where the "
                            "rest of the run cannot repay it",
                            &TrainConfig::growth_test_budget, both));
  t.push_back(enum_option(
      "growth-control",
      "--growth-test branch: compare the doubled branch with the current batch at its rate "
      "(rate), or at the doubled batch's noise temperature, rate over batch (temperature: the "
      "batch alone is judged, not a lower temperature's quick gain)",
      &TrainConfig::growth_control, &growth_control_names, both));
  t.push_back(optional_int_option(
      "growth-holdout",
      "training samples set aside (the last N) to score --growth-test branch's branches on; "
      "default 2% of the training set (256 to 2048) under the branch test, else 0; a replay of "
      "an automatic run gives the same N",
      &TrainConfig::growth_holdout, data));
  {
    OptionSpec s{"update-cost",
                 "--global-batch auto: an update's fixed cost (all-reduce, optimizer) in samples "
                 "of compute; auto: timed over the run's first updates",
                 "X|auto",
                 both,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      c.update_cost.reset();
      if (trim(text) != "auto")
        c.update_cost = to_double("update-cost", text);
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      if (!c.update_cost)
        return std::nullopt;
      return *c.update_cost;
    };
    t.push_back(s);
  }
  {
    OptionSpec s{"global-batch-schedule",
                 "grow the global batch at thresholds in samples or epochs, e.g. \"0:256 "
                 "200000s:1024 1e6s:4096\"; the micro-batch stays, accumulation grows, the rate "
                 "follows --lr-scaling and the schedule counts samples",
                 "\"0:B1 T2:B2 ...\"",
                 both,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      c.global_batch_schedule = GlobalBatchSchedule::parse(text).to_string();
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      if (c.global_batch_schedule.empty())
        return std::nullopt;
      return c.global_batch_schedule;
    };
    t.push_back(s);
  }
  t.push_back(int_or_auto_option("micro-batch",
                                 "samples per forward/backward pass on one rank; auto: the "
                                 "fastest size whose measured peak fits --memory-budget",
                                 &TrainConfig::micro_batch, &TrainConfig::micro_batch_auto, both));
  t.push_back(optional_int_option("accum-steps", "micro-steps accumulated per update",
                                  &TrainConfig::accum_steps, both));
  t.push_back(int_option("micro-batch-tokens",
                         "token sequences: cut each window into micro-batches of at most N padded "
                         "tokens (rows x longest, after sorting by length) instead of by rows; the "
                         "update is the same, memory is bounded by tokens (0: off)",
                         &TrainConfig::micro_batch_tokens, data));
  t.push_back(enum_option("last-window",
                          "short final window of an epoch: keep (exact mean) or drop",
                          &TrainConfig::last_window, &last_window_names, both));
  t.push_back(switch_option("strict-batch",
                            "make any change to the effective batch an error (a short last "
                            "window, an out-of-memory back-off that cannot keep it)",
                            &TrainConfig::strict_batch, true, both));
  {
    OptionSpec s{"memory-budget",
                 "tensor memory a training process may use, e.g. 512MiB or 2GiB; an allocation "
                 "beyond it is an out-of-memory error (which training backs off from)",
                 "SIZE",
                 kTrainCommand | kFitCommand,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      const auto bytes = parse_byte_size(text);
      if (!bytes || *bytes <= 0)
        bad_value("memory-budget", text, "a size with a unit such as 512MiB or 2GiB");
      c.memory_budget = *bytes;
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      if (c.memory_budget == 0)
        return std::nullopt;
      return exact_byte_size(c.memory_budget);
    };
    t.push_back(s);
  }
  t.push_back(double_option("fit-margin",
                            "safety margin of the micro-batch fit: the chosen size's measured "
                            "peak stays under budget x (1 - margin)",
                            &TrainConfig::fit_margin, kTrainCommand | kFitCommand));
  t.push_back(enum_option("optimizer",
                          "sgd (momentum, nesterov), adamw, lars (layer-wise SGD) or lamb "
                          "(layer-wise Adam; uses --adam-beta1/2 and --adam-eps)",
                          &TrainConfig::optimizer, &optimizer_names,
                          kTrainCommand | kFitCommand | kPlanCommand));
  {
    OptionSpec s{"lr",
                 "base learning rate, tuned at --lr-ref-batch (default: 0.05, tuned at a global "
                 "batch of 256 and scaled from there)",
                 "X",
                 both,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) { c.lr = to_double("lr", text); };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      if (!c.lr)
        return std::nullopt;
      return *c.lr;
    };
    t.push_back(s);
  }
  t.push_back(optional_int_option("lr-ref-batch",
                                  "batch size the base --lr is tuned at (default: 256 for the "
                                  "default rate; the global batch for a --lr given)",
                                  &TrainConfig::lr_ref_batch, both));
  t.push_back(enum_option("lr-scaling",
                          "scale the rate from --lr-ref-batch to the global batch: auto (sqrt; "
                          "linear for lars: the rule that held here, docs/benchmarks.md), none, "
                          "linear, sqrt, or adascale (sgd: a gain measured each update from the "
                          "gradient noise; Johnson et al. 2020)",
                          &TrainConfig::lr_scaling, &lr_scaling_names, both));
  t.push_back(optional_switch_option(
      "adam-sqrt-adjust",
      "with adamw and the sqrt rule, also scale the betas and epsilon (Malladi et al. 2022): "
      "beta -> 1 - k(1 - beta), eps -> eps / sqrt(k), k = batch / --lr-ref-batch, at every batch "
      "a ramp or auto takes (default: on under --global-batch auto with adamw and the sqrt rule, "
      "off elsewhere)",
      &TrainConfig::adam_sqrt_adjust, true, both));
  t.push_back(optional_switch_option("no-adam-sqrt-adjust",
                                     "keep adamw's betas and epsilon at every batch, also under "
                                     "--global-batch auto",
                                     &TrainConfig::adam_sqrt_adjust, false, both));
  t.push_back(double_option("momentum", "SGD momentum", &TrainConfig::momentum, train_and_fit));
  t.push_back(switch_option("nesterov",
                            "Nesterov momentum (SGD; bigbatch's default, not PyTorch's)",
                            &TrainConfig::nesterov, true));
  t.push_back(switch_option("no-nesterov", "plain (heavy-ball) momentum (SGD)",
                            &TrainConfig::nesterov, false));
  t.back().negates_another = true;
  t.push_back(double_option("weight-decay",
                            "weight decay, applied once per update (decoupled for adamw)",
                            &TrainConfig::weight_decay));
  t.push_back(double_option("clip-norm",
                            "clip the accumulated gradient to this global L2 norm (0: off)",
                            &TrainConfig::clip_norm));
  t.push_back(double_option("label-smoothing",
                            "smooth the training cross-entropy's targets (PyTorch's "
                            "label_smoothing; 0: off); evaluations report the plain loss",
                            &TrainConfig::label_smoothing));
  t.push_back(enum_option("precision",
                          "fp32, or bf16: forward pass under bfloat16 autocast with fp32 "
                          "weights, loss and gradient accumulation",
                          &TrainConfig::precision, &precision_names, train_and_fit));
  {
    OptionSpec s{"device",
                 "where the model, its batches, gradients and optimizer state live: cpu, cuda "
                 "(each rank its LOCAL_RANK's device), cuda:N, or auto (cuda when this build "
                 "has it and a device is visible)",
                 "cpu|cuda|cuda:N|auto",
                 // plan takes it so that a train command plans as written (the plan is the
                 // same on every device)
                 kTrainCommand | kFitCommand | kPlanCommand, nullptr, nullptr};
    s.set = [](TrainConfig& c, const std::string& text) { c.device = DeviceChoice::parse(text); };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> { return c.device.to_string(); };
    t.push_back(s);
  }
  t.push_back(switch_option("no-noise-scale",
                            "do not measure the gradient noise scale (saves one pass over the "
                            "gradients per update)",
                            &TrainConfig::noise_scale, false, both));
  t.push_back(enum_option("noise-gradient",
                          "what the noise scale measures: the raw gradient, or the gradient "
                          "times adamw's or lamb's preconditioner 1/(sqrt(v)+eps), the noise of "
                          "the update's direction (preconditioned; as Pollux); auto: "
                          "preconditioned for adamw and lamb, raw for sgd and lars",
                          &TrainConfig::noise_gradient, &noise_gradient_names, both));
  t.push_back(switch_option("no-tensorboard",
                            "do not write TensorBoard event files in the run directory "
                            "(metrics.jsonl holds the same figures)",
                            &TrainConfig::tensorboard, false));
  t.push_back(switch_option("prefetch",
                            "gather the window's next micro-batch on a background thread while "
                            "the current one trains (off by default: with in-memory data on 2 "
                            "cores it does not pay, see docs/benchmarks.md)",
                            &TrainConfig::prefetch, true));
  t.push_back(switch_option("keep-denormals",
                            "compute with denormal floats (x86 FTZ/DAZ off); by default they are "
                            "flushed to zero, which is much faster when they occur (e.g. "
                            "confident softmax outputs) and changes no result above 1e-38",
                            &TrainConfig::keep_denormals, true, kTrainCommand | kFitCommand));
  t.push_back(double_option("adam-beta1", "AdamW beta1", &TrainConfig::adam_beta1, both));
  t.push_back(double_option("adam-beta2", "AdamW beta2", &TrainConfig::adam_beta2, both));
  t.push_back(double_option("adam-eps", "AdamW epsilon", &TrainConfig::adam_eps, both));
  t.push_back(
      double_option("lars-trust", "LARS trust coefficient (eta)", &TrainConfig::lars_trust));
  {
    OptionSpec s{"warmup",   "linear warmup length: 500u updates, 2e epochs, 120000s samples",
                 "INTERVAL", both,
                 nullptr,    nullptr};
    s.set = [](TrainConfig& c, const std::string& text) { c.warmup = Interval::parse(text); };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> { return c.warmup.to_string(); };
    t.push_back(s);
  }
  {
    OptionSpec s{"schedule-length",
                 "the schedule's length when it is not the run's: 5000u, 10e, 2e6s (past it "
                 "the rate holds its final value); a resume at a longer --epochs keeps the "
                 "run's schedule with its old length here",
                 "INTERVAL",
                 both,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      c.schedule_length = Interval::parse(text);
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      if (!c.schedule_length)
        return std::nullopt;
      return c.schedule_length->to_string();
    };
    t.push_back(s);
  }
  t.push_back(double_option("warmup-start-factor",
                            "warmup starts at this fraction of the peak rate",
                            &TrainConfig::warmup_start_factor, both));
  t.push_back(enum_option("schedule",
                          "decay after warmup: constant, cosine, linear or step (range-test: "
                          "bigbatch lr-find's rising rate)",
                          &TrainConfig::schedule, &schedule_kind_names, both));
  t.push_back(double_option("min-lr-factor", "cosine and linear decay end at peak x this factor",
                            &TrainConfig::min_lr_factor, both));
  {
    OptionSpec s{"step-milestones",
                 "step decay points, comma-separated intervals (e.g. 3e,6e)",
                 "LIST",
                 both,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      c.step_milestones.clear();
      if (trim(text).empty())
        return;  // an empty list
      for (const auto& part : split(text, ','))
        c.step_milestones.push_back(Interval::parse(part));
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      return interval_strings(c.step_milestones);
    };
    s.is_list = true;
    t.push_back(s);
  }
  t.push_back(double_option("step-gamma",
                            "step decay multiplies the rate by this at each milestone",
                            &TrainConfig::step_gamma, both));
  t.push_back(int_option("epochs", "epochs to train", &TrainConfig::epochs, both));
  t.push_back(double_option("target-accuracy",
                            "stop at the end of the first epoch whose validation accuracy (test "
                            "accuracy without --val-size) reaches this fraction, e.g. 0.9 (0: off)",
                            &TrainConfig::target_accuracy));
  {
    OptionSpec s = string_option(
        "target",
        "stop at the end of the first epoch whose metric reaches this: val_accuracy>=0.9, "
        "val_bpb<=1.9, val_loss<=0.3, test_rmse<=0.1 (accuracy, loss, perplexity, bpb, rmse; "
        "val_ or test_, or neither: validation when there is a split)",
        "METRIC<=X", &TrainConfig::target);
    // Normalised, so config.toml and the rank check read one spelling.
    s.set = [](TrainConfig& c, const std::string& text) {
      c.target = text.empty() ? std::string() : StopTarget::parse(text).to_string();
    };
    t.push_back(s);
  }
  // A watched metric's name, normalised, so config.toml and the rank check read one spelling.
  const auto metric_option = [](std::string name, std::string help,
                                std::string TrainConfig::*field) {
    OptionSpec s = string_option(name, std::move(help), "METRIC", field);
    s.set = [name, field](TrainConfig& c, const std::string& text) {
      c.*field = text.empty() ? std::string() : WatchedMetric::parse(text, "--" + name).name();
    };
    return s;
  };
  t.push_back(metric_option(
      "early-stop",
      "stop when this evaluated metric (val_loss, val_accuracy, val_bpb, ...; evaluated at each "
      "epoch's end and every --eval-every) has not improved for --patience evaluations",
      &TrainConfig::early_stop));
  t.push_back(int_option("patience",
                         "--early-stop's evaluations without improvement before it stops",
                         &TrainConfig::patience));
  t.push_back(double_option("min-delta",
                            "--early-stop counts only improvements larger than this (in the "
                            "metric's units)",
                            &TrainConfig::min_delta));
  t.push_back(metric_option(
      "keep-best",
      "keep the weights of the evaluation with the best value of this metric (val_loss, "
      "val_accuracy, ...) in RUN/best.safetensors",
      &TrainConfig::keep_best));
  t.push_back(optional_int_option("max-updates",
                                  "stop after this many updates (0: write initial weights only)",
                                  &TrainConfig::max_updates, both));
  {
    OptionSpec s{"seed", "seed for initialisation and shuffling", "N", data, nullptr, nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      const int64_t v = to_int("seed", text);
      if (v < 0)
        bad_value("seed", text, "a non-negative integer");
      c.seed = static_cast<uint64_t>(v);
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      return static_cast<int64_t>(c.seed);
    };
    t.push_back(s);
  }
  t.push_back(switch_option("no-shuffle", "keep the dataset's file order in every epoch",
                            &TrainConfig::shuffle, false));
  t.push_back(int_option("threads",
                         "intra-op threads (0: auto, 1 or all the CPUs this process may use, "
                         "whichever a timed micro-step finds faster; never more than those CPUs)",
                         &TrainConfig::threads, train_and_fit));
  t.push_back(
      string_option("out", "run directory (default runs/<timestamp>)", "DIR", &TrainConfig::out));
  t.push_back(string_option("init-weights", "start from these weights (safetensors)", "FILE",
                            &TrainConfig::init_weights));
  t.push_back(string_option("save-weights", "also write the final weights here (safetensors)",
                            "FILE", &TrainConfig::save_weights));
  t.push_back(enum_option("progress",
                          "auto (bar on a terminal, lines otherwise; fit: nothing otherwise), "
                          "bar, lines or off",
                          &TrainConfig::progress, &progress_mode_names,
                          kTrainCommand | kFitCommand));
  {
    OptionSpec s{"eval-every",
                 "also evaluate on an interval between epoch ends: 500u updates, 0.25e epochs, "
                 "120000s samples, 4Mt tokens (a --target is then checked there too)",
                 "INTERVAL",
                 kTrainCommand,
                 nullptr,
                 nullptr};
    s.set = [](TrainConfig& c, const std::string& text) {
      c.eval_every = Interval::parse(text);
      // Zero would otherwise read as "not given" and evaluate only at epoch ends, silently.
      check_config(!c.eval_every.is_zero(), "--eval-every " + text + " is a zero interval",
                   "give a positive one (e.g. 500u), or leave --eval-every out to evaluate at "
                   "epoch ends only");
    };
    s.get = [](const TrainConfig& c) -> std::optional<ConfigValue> {
      if (c.eval_every.is_zero())
        return std::nullopt;
      return c.eval_every.to_string();
    };
    t.push_back(s);
  }
  t.push_back(string_option(
      "checkpoint-every",
      "write a checkpoint every 200u (updates), 1e (epochs), 120000s (samples), 30min, or 40micro "
      "(micro-steps, also inside a window); "
      "one is always written at the end",
      "CADENCE", &TrainConfig::checkpoint_every));
  t.push_back(int_option(
      "max-bad-updates",
      "stop the run after this many skipped updates in a row (non-finite, or loss spikes); the "
      "newest checkpoint, from before them, is kept",
      &TrainConfig::max_bad_updates));
  t.push_back(double_option("spike-factor",
                            "skip an update whose loss is more than this times the median of the "
                            "last 32 applied updates, as early sign of divergence (0: skip only "
                            "non-finite ones)",
                            &TrainConfig::spike_factor));
  t.push_back(int_option("keep-checkpoints", "keep the newest N checkpoints",
                         &TrainConfig::keep_checkpoints));
  {
    // Not written to config.toml: a resolved configuration starts a run, it does not resume one.
    OptionSpec s{"resume", "continue the run in this directory (or from this checkpoint directory)",
                 "DIR",    kTrainCommand,
                 nullptr,  nullptr};
    s.set = [](TrainConfig& c, const std::string& text) { c.resume = text; };
    s.get = [](const TrainConfig&) -> std::optional<ConfigValue> { return std::nullopt; };
    t.push_back(s);
  }
  {
    // An action of this resume, like --resume itself: not written to config.toml.
    OptionSpec s = switch_option("discard-newer",
                                 "with --resume of an older checkpoint: move the run's newer "
                                 "checkpoints to RUN/abandoned/ and continue from it as a new "
                                 "history (without it, such a resume is refused)",
                                 &TrainConfig::discard_newer, true);
    s.get = [](const TrainConfig&) -> std::optional<ConfigValue> { return std::nullopt; };
    t.push_back(s);
  }
  t.push_back(double_option("dist-timeout",
                            "seconds a rank waits for the others (rendezvous, all-reduce)",
                            &TrainConfig::dist_timeout));
  t.push_back(double_option("bucket-mb",
                            "gradient all-reduce bucket size in MiB (data parallelism)",
                            &TrainConfig::bucket_mb));
  t.push_back(switch_option("shard-optimizer",
                            "data parallelism: each rank keeps the optimizer state (momentum, "
                            "adam's moments) of its share of the parameters and steps them, then "
                            "sends the new values to the others: the state's memory over the "
                            "ranks, the same weights bit for bit",
                            &TrainConfig::shard_optimizer, true));
  t.push_back(switch_option("no-shard-optimizer",
                            "every rank keeps the whole optimizer state (the default; a resume "
                            "of a sharded run may drop the sharding)",
                            &TrainConfig::shard_optimizer, false));
  t.back().negates_another = true;
  return t;
}

std::string node_to_text(const toml::node& node, const OptionSpec& spec) {
  const std::string& key = spec.name;
  if (auto v = node.as_integer())
    return std::to_string(v->get());
  if (auto v = node.as_floating_point())
    return format_double(v->get());
  if (auto v = node.as_boolean())
    return v->get() ? "true" : "false";
  if (auto v = node.as_string())
    return v->get();
  if (auto array = node.as_array()) {
    if (!spec.is_list) {
      // `lr = [0.1]` is not a sweep: it would be read as 0.1 and hide the mistake.
      throw Error(
          ErrorKind::Config, "config key '" + key + "' takes one value, not a list",
          "write it without brackets, e.g. " + key + " = " +
              (!array->empty() && array->get(0)->is_value() ? node_to_text(*array->get(0), spec)
                                                            : std::string("<one value>")));
    }
    std::vector<std::string> parts;
    for (const auto& element : *array) {
      if (element.is_array() || element.is_table())
        break;
      parts.push_back(node_to_text(element, spec));
    }
    if (parts.size() == array->size())
      return join(parts, ",");
  }
  throw Error(ErrorKind::Config, "config key '" + key + "' has a value of an unsupported type",
              "use a number, string, boolean or a list of them");
}

// A TOML value in words, for a refusal: "the string '2'", "the float 1000.0".
std::string describe_node(const toml::node& node) {
  if (auto v = node.as_string())
    return "the string '" + v->get() + "'";
  if (auto v = node.as_floating_point())
    return "the float " + format_double(v->get());
  if (auto v = node.as_integer())
    return "the integer " + std::to_string(v->get());
  if (auto v = node.as_boolean())
    return std::string("the boolean ") + (v->get() ? "true" : "false");
  if (node.is_array())
    return "a list";
  return "a table";
}

// TOML values have types, and the option's value has one: a value of another type would be
// coerced through its text (`epochs = '2'`, `no-shuffle = 1`, `hidden = [1e3]`), hiding a
// mistake. Strings take any scalar (intervals, sizes and names are read from their text).
void check_toml_type(const toml::node& node, const OptionSpec& spec, const ConfigValue& value) {
  const auto refuse = [&](const toml::node& seen, const std::string& wanted,
                          const std::string& example) {
    throw Error(ErrorKind::Config,
                "key '" + spec.name + "' is " + describe_node(seen) + ", but it takes " + wanted,
                "write it as " + example);
  };
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean())
            refuse(node, "true or false", spec.name + " = true");
        } else if constexpr (std::is_same_v<T, int64_t>) {
          if (!node.is_integer())
            refuse(node, "an integer", spec.name + " = " + std::to_string(v));
        } else if constexpr (std::is_same_v<T, double>) {
          if (!node.is_number())
            refuse(node, "a number", spec.name + " = " + format_double(v));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::vector<std::string> shown;
          for (const int64_t x : v)
            shown.push_back(std::to_string(x));
          const std::string example = spec.name + " = [" + join(shown, ", ") + "]";
          if (const auto* array = node.as_array()) {
            for (const auto& element : *array) {
              if (!element.is_integer())
                refuse(element, "integers", example);
            }
          } else if (!node.is_integer()) {
            refuse(node, "integers", example);
          }
        }
      },
      value);
}

}  // namespace

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = build_table();
  return table;
}

const OptionSpec& find_option(const std::string& name) {
  for (const auto& spec : option_table()) {
    if (spec.name == name)
      return spec;
  }
  BB_INTERNAL_ASSERT(false, "no option named " + name);
}

void apply_option(TrainConfig& config, const OptionSpec& spec, const std::string& text) {
  spec.set(config, text);
}

void load_toml_config(TrainConfig& config, const std::string& path) {
  if (!path_exists(path)) {
    throw Error(ErrorKind::Config, "config file '" + path + "' does not exist",
                "check the path given to --config");
  }
  load_toml_config_text(config, read_text_file(path, kMaxConfigFileBytes), path);
}

void load_toml_config_text(TrainConfig& config, const std::string& text, const std::string& path) {
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorKind::Config,
                "config file '" + path + "' is not valid TOML at line " +
                    std::to_string(e.source().begin.line) + ", column " +
                    std::to_string(e.source().begin.column) + ": " + std::string(e.description()),
                "fix the syntax (docs/reference.md's 'Configuration files' shows the format)");
  }
  std::vector<std::string> names;
  for (const auto& spec : option_table())
    names.push_back(spec.name);
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    const OptionSpec* spec = nullptr;
    for (const auto& s : option_table()) {
      if (s.name == name)
        spec = &s;
    }
    if (name == "resume") {
      // A configuration describes a run to start; a resumed run reads its own config.toml.
      throw Error(
          ErrorKind::Config,
          "config file '" + path + "' has the key 'resume', which only the command line takes",
          "remove it and run 'bigbatch train --resume RUN'");
    }
    if (!spec) {
      const auto guess = closest_match(name, names);
      throw Error(ErrorKind::Config, "config file '" + path + "' has unknown key '" + name + "'",
                  guess ? "did you mean '" + *guess + "'?"
                        : "keys are the flag names of 'bigbatch train --help'");
    }
    try {
      apply_option(config, *spec, node_to_text(node, *spec));
      if (const std::optional<ConfigValue> value = spec->get(config))
        check_toml_type(node, *spec, *value);
    } catch (const Error& e) {
      throw Error(ErrorKind::Config, "config file '" + path + "': " + e.problem(), e.hint());
    }
  }
}

namespace {

// A TOML float the shortest way that reads back to the same double ("0.9", not toml++'s
// "0.90000000000000002"); whole numbers keep ".0" so the value stays a float.
std::string toml_float(double value) {
  std::string text = format_double(value);
  if (text.find_first_of(".eEin") == std::string::npos)
    text += ".0";
  return text;
}

std::string toml_value(const ConfigValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        std::ostringstream out;
        if constexpr (std::is_same_v<T, double>) {
          return toml_float(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<std::string>>) {
          toml::array array;
          for (const auto& element : v)
            array.push_back(element);
          out << array;
        } else {
          out << toml::value<T>(v);  // toml++'s quoting and escaping for strings
        }
        return out.str();
      },
      value);
}

}  // namespace

std::string render_toml_config(const TrainConfig& config) {
  // Keys in name order, as a TOML table prints them.
  std::map<std::string, std::string> lines;
  for (const auto& spec : option_table()) {
    if (!(spec.commands & kTrainCommand) || spec.negates_another)
      continue;
    if (const auto value = spec.get(config))
      lines[spec.name] = toml_value(*value);
  }
  std::ostringstream out;
  out << "# bigbatch resolved configuration: repeat this run with bigbatch train --config FILE\n";
  for (const auto& [name, text] : lines)
    out << name << " = " << text << "\n";
  out << "\n";
  return out.str();
}

namespace {

// A value as a flag takes it: lists comma-separated, numbers the shortest way that round-trips.
std::string flag_text(const ConfigValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return format_double(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return v; }
    std::string operator()(const std::vector<int64_t>& v) const {
      std::string out;
      for (const int64_t x : v)
        out += (out.empty() ? "" : ",") + std::to_string(x);
      return out;
    }
    std::string operator()(const std::vector<std::string>& v) const {
      std::string out;
      for (const auto& x : v)
        out += (out.empty() ? "" : ",") + x;
      return out;
    }
  };
  return std::visit(Visitor{}, value);
}

// Single quotes for the shell when the text holds anything but plain characters.
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./:,=+@%", c);
  });
  if (plain)
    return text;
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string flags_set_in(const TrainConfig& config, const std::vector<std::string>& leave_out) {
  const TrainConfig defaults;
  std::string out;
  for (const auto& spec : option_table()) {
    if (!(spec.commands & kTrainCommand) ||
        std::find(leave_out.begin(), leave_out.end(), spec.name) != leave_out.end())
      continue;
    const auto value = spec.get(config);
    if (!value || value == spec.get(defaults))
      continue;
    if (spec.is_switch()) {
      if (std::get<bool>(*value))  // a switch says one state; its partner says the other
        out += " --" + spec.name;
      continue;
    }
    out += " --" + spec.name + " " + shell_word(flag_text(*value));
  }
  return out;
}

}  // namespace bigbatch
