#include "train/run_setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "batching/batch_plan.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/sampler.h"
#include "data/text_corpus.h"
#include "device/device.h"
#include "memory/tracking_allocator.h"
#include "models/scripted_model.h"
#include "models/user_module.h"
#include "optim/optimizer.h"
#include "runtime/runtime_env.h"
#include "schedule/batch_schedule.h"

namespace bigbatch {

ModelSpec model_spec(const TrainConfig& config, const TensorDataset& data) {
  ModelSpec spec;
  spec.name = config.model;
  spec.hidden = config.hidden;
  if (data.is_tokens()) {
    spec.gpt.vocab = data.vocabulary;
    spec.gpt.seq_len = data.width();
    spec.gpt.layers = config.layers;
    spec.gpt.d_model = config.d_model;
    spec.gpt.heads = config.heads;
    spec.gpt.dropout = config.dropout;
    spec.gpt.recompute = config.recompute;
    return spec;
  }
  // [N, C, H, W] images, or [N, F] rows of features (numpy): one channel of one row.
  const int64_t dims = data.inputs.dim();
  spec.channels = dims == 4 ? data.inputs.size(1) : 1;
  spec.height = dims == 4 ? data.inputs.size(2) : 1;
  spec.width = data.inputs.size(dims - 1);
  if (data.outputs() > 0)
    spec.classes = data.outputs();  // the output layer's width: classes or regression targets
  return spec;
}

namespace {

// What training needs of the module's result: gradients that reach its parameters.
void check_differentiable(const UserModuleImpl& model, const torch::Tensor& result,
                          const std::string& what) {
  if (result.requires_grad())
    return;
  throw Error(ErrorKind::Model,
              "model '" + model.name() + "' returned " + what +
                  " with no gradient path to its trainable parameters",
              "compute it from the module's parameters without .detach(), torch.no_grad() or "
              ".item() (docs/your-model.md)");
}

// A module's loss summed over its batch adds up over samples: loss(a) + loss(b) = loss(a, b).
// A mean (reduction='mean', PyTorch's default) gives their average instead, and accumulating
// means weighs a small micro-batch's samples more than one big batch would. Named here, on the
// first two samples alone and together (in eval mode: no dropout), before anything trains. A
// loss that neither adds up nor averages (random masking inside the module) is let through.
void check_loss_is_summed(UserModuleImpl& model, const TensorDataset& data) {
  if (data.size() < 2)
    return;
  const torch::NoGradGuard no_grad;
  auto loss_of = [&](int64_t begin, int64_t end) {
    const Batch batch = batch_of(data, begin, end);
    const torch::Tensor loss = model.computes_loss()
                                   ? model.forward_loss(batch.inputs, batch.targets).loss_sum
                                   : model.forward_and_loss(batch.inputs, batch.targets).loss_sum;
    return loss.item<double>();
  };
  const double first = loss_of(0, 1);
  const double second = loss_of(1, 2);
  const double both = loss_of(0, 2);
  const double sum = first + second;
  const double tolerance = 1e-4 * std::abs(sum);
  if (!(std::abs(sum) > 1e-6) || std::abs(both - sum) <= tolerance ||
      std::abs(both - sum / 2) > tolerance)
    return;
  const std::string method =
      model.computes_loss() ? "forward(inputs, targets)" : "loss(outputs, targets)";
  throw Error(ErrorKind::Model,
              "model '" + model.name() + "' " + method +
                  " returns the mean over its batch, not the sum: " + format_significant(first, 4) +
                  " and " + format_significant(second, 4) + " for two samples alone, " +
                  format_significant(both, 4) + " for both",
              "sum over the batch (reduction='sum'): bigbatch divides once by the whole "
              "update's items, so micro-batches of any size weigh as in one big batch "
              "(docs/your-model.md)");
}

// A user's module meets the data here, before anything is written: one forward pass on two
// samples, in eval mode (no dropout: no random numbers drawn), with gradients so that a result
// detached from the parameters is named now, not as an internal error in the first backward.
void check_outputs(UserModuleImpl& model, const TensorDataset& data) {
  bool trainable = false;
  for (const torch::Tensor& parameter : model.parameters())
    trainable = trainable || parameter.requires_grad();
  if (!trainable) {
    throw Error(ErrorKind::Model,
                "model '" + model.name() + "' has parameters, but none requires a gradient",
                "leave requires_grad on for what should train (no requires_grad_(False) on "
                "every parameter)");
  }
  const Batch probe = batch_of(data, 0, std::min<int64_t>(2, data.size()));
  const torch::AutoGradMode gradients(true);  // whatever mode the caller is in
  const bool training = model.is_training();
  model.eval();
  if (model.computes_loss()) {  // its own loss: the tuple's form is checked by forward_loss
    const torch::Tensor loss = model.forward_loss(probe.inputs, probe.targets).loss_sum;
    check_loss_is_summed(model, data);
    model.train(training);
    check_differentiable(model, loss, "a loss");
    return;
  }
  torch::Tensor logits;
  torch::Tensor loss;
  if (model.has_loss_method()) {  // the loss's form is checked by forward_and_loss
    const ScoredLoss scored = model.forward_and_loss(probe.inputs, probe.targets);
    logits = scored.logits;
    loss = scored.loss_sum;
    check_loss_is_summed(model, data);
  } else {
    logits = model.forward(probe.inputs);
  }
  model.train(training);
  const std::string seen = "forward() returned " + c10::str(logits.sizes()) + " for inputs " +
                           c10::str(probe.inputs.sizes());
  if (data.is_tokens()) {
    const int64_t vocabulary = data.vocabulary;
    const bool ok = logits.dim() == 3 && logits.size(0) == probe.inputs.size(0) &&
                    logits.size(1) == probe.inputs.size(1) && logits.size(2) >= vocabulary;
    if (!ok) {
      throw Error(
          ErrorKind::Model,
          "model '" + model.name() + "' " + seen + "; a language model returns logits " +
              "[batch, tokens, vocabulary] with a vocabulary of at least " +
              std::to_string(vocabulary) +
              (vocabulary == kByteVocabulary ? " (256 bytes and end-of-text)" : " (the data's)"),
          "end the module with nn.Linear(d_model, " + std::to_string(vocabulary) +
              ") over every position (docs/your-model.md)");
    }
  } else if (data.is_regression()) {
    const int64_t outputs = data.outputs();
    const bool ok =
        logits.numel() == probe.inputs.size(0) * outputs && logits.size(0) == probe.inputs.size(0);
    if (!ok) {
      throw Error(ErrorKind::Model,
                  "model '" + model.name() + "' " + seen + "; regressing on these targets needs " +
                      "outputs [batch, " + std::to_string(outputs) + "]",
                  data.targets_look_like_classes()
                      ? "if these are class labels, save them as integers (y.astype('int64')): "
                        "float labels are regression targets; otherwise end the module with "
                        "nn.Linear(features, 1) (docs/your-model.md)"
                      : "end the module with nn.Linear(features, " + std::to_string(outputs) +
                            ") (docs/your-model.md)");
    }
  } else {
    const int64_t classes = data.targets.max().item<int64_t>() + 1;
    if (data.targets.dim() == 2) {  // a label per position: logits per position
      const bool ok = logits.dim() == 3 && logits.size(0) == probe.inputs.size(0) &&
                      logits.size(1) == data.targets.size(1) && logits.size(2) >= classes;
      if (!ok) {
        throw Error(ErrorKind::Model,
                    "model '" + model.name() + "' " + seen + "; targets of " +
                        std::to_string(data.targets.size(1)) + " positions need logits [batch, " +
                        std::to_string(data.targets.size(1)) + ", classes] for " +
                        std::to_string(classes) + " classes",
                    "return logits for every position, e.g. nn.Linear(d_model, " +
                        std::to_string(classes) + ") over the sequence");
      }
    }
    const bool ok =
        data.targets.dim() == 2 ||
        (logits.dim() == 2 && logits.size(0) == probe.inputs.size(0) && logits.size(1) >= classes);
    if (!ok) {
      throw Error(ErrorKind::Model,
                  "model '" + model.name() + "' " + seen + "; classifying these images needs " +
                      "logits [batch, classes] for " + std::to_string(classes) + " classes",
                  "end the module with nn.Linear(features, " + std::to_string(classes) +
                      ") (docs/your-model.md)");
    }
  }
  if (!logits.is_floating_point()) {
    throw Error(ErrorKind::Model, "model '" + model.name() + "' returned integer logits",
                "return the floating-point logits before any argmax");
  }
  check_differentiable(model, logits, "outputs");
  if (loss.defined())
    check_differentiable(model, loss, "a loss");
}

}  // namespace

void check_user_module(UserModuleImpl& model, const TrainConfig& config,
                       const TensorDataset& data) {
  check_outputs(model, data);
  const std::optional<StopTarget> target = config.stop_target();
  const bool needs_predictions =
      target && (target->metric == "accuracy" || target->metric == "rmse");
  check_config(!needs_predictions || !model.computes_loss(),
               stop_target_flag(config) + " needs predictions, but model '" + model.name() +
                   "' computes its own loss and returns none",
               "drop " + stop_target_flag(config) +
                   " (or stop on val_loss<=X), or let "
                   "forward(inputs) return outputs");
}

void check_tokenizer_of_weights(const std::map<std::string, std::string>& metadata,
                                const std::string& sentencepiece_model, const std::string& source) {
  const auto digest = metadata.find(kTokenizerDigestKey);
  // A missing file is the tokenizer's own error to say, where it loads.
  if (digest == metadata.end() || sentencepiece_model.empty() || !path_exists(sentencepiece_model))
    return;
  if (file_digest(sentencepiece_model) != digest->second) {
    throw Error(ErrorKind::Data,
                "sentencepiece model '" + sentencepiece_model + "' is not the one '" + source +
                    "' trained with (its CRC-32 or size differs from the weights' record)",
                "restore the .model file the run trained with");
  }
}

torch::nn::Sequential build_model(const TrainConfig& config, const TensorDataset& data) {
  if (is_custom(config.model)) {
    throw Error(ErrorKind::Usage,
                "model '" + config.model + "' comes from " + custom_origin(config.model) +
                    "; the command line cannot build it",
                "train, resume or evaluate it from that program");
  }
  if (is_torchscript_model(config.model)) {
    auto scripted = load_scripted_model(torchscript_path(config.model));
    check_user_module(*scripted, config, data);
    // As its base type: the holder would otherwise wrap it as the first layer of a new one.
    return torch::nn::Sequential(std::shared_ptr<torch::nn::SequentialImpl>(scripted));
  }
  const BuiltinModel builtin = builtin_model_names().parse(config.model);
  if (!data.is_tokens() && data.inputs.dim() != 4 && builtin != BuiltinModel::Mlp) {
    throw Error(ErrorKind::Config,
                config.model + " convolves images [N, C, H, W], but the dataset's samples are " +
                    "rows of " + std::to_string(data.inputs.size(1)) + " features",
                "use --model mlp, or your own module (--model torchscript:FILE)");
  }
  auto model = make_model(model_spec(config, data));
  if (config.norm == NormKind::Group)
    model = rewrite_batch_norm_as_group_norm(model);
  return model;
}

double prepare_for_training(torch::nn::Sequential& model, const TrainConfig& config,
                            int64_t micro_steps) {
  model->train();
  apply_batch_norm_mode(*model, config.bn_mode);
  // A user's module keeps its own BatchNorm momentum (a TorchScript module's is a constant).
  if (!uses_batch_statistics(*model) || as_user_module(*model))
    return 0;
  const double momentum = config.bn_momentum_correction
                              ? micro_step_momentum(kBatchNormMomentum, micro_steps)
                              : kBatchNormMomentum;
  set_batch_norm_momentum(*model, momentum);
  return momentum;
}

std::string stop_target_flag(const TrainConfig& config) {
  return config.target.empty() ? "--target-accuracy" : "--target";
}

void check_eval_every(const TrainConfig& config, const DatasetSplits& data) {
  check_config(config.eval_every.is_zero() || data.validation.size() + data.test.size() > 0,
               "--eval-every " + config.eval_every.to_string() +
                   " evaluates the held-out splits, and this run holds none",
               "add --val-size N to hold out N training samples, or drop --eval-every");
}

namespace {

// Whether the evaluations report `watched` for this data, or the error that says why not.
// `flag` names the option ("--target"), `verb` what it does with the metric ("stops on"),
// `instead` the same option on a metric that works ("--target val_loss<=X").
void check_metric_reported(const WatchedMetric& watched, const std::string& flag,
                           const std::string& verb, const std::string& instead,
                           const DatasetSplits& data) {
  const std::string& m = watched.metric;
  const TensorDataset& train = data.train;
  if (m == "accuracy" && train.is_regression()) {
    throw Error(
        ErrorKind::Config,
        flag + " " + verb + " accuracy, and these float targets make a regression, which has none",
        "drop " + flag + " (or use " + instead +
            "), or save integer class labels for a classifier");
  }
  if (m == "rmse" && !train.is_regression()) {
    throw Error(ErrorKind::Config, flag + " " + verb + " RMSE, which only a regression has",
                "use " + instead);
  }
  if ((m == "perplexity" || m == "bpb") && !train.is_tokens()) {
    throw Error(ErrorKind::Config,
                flag + " " + verb + " " + m + ", which only language models have",
                "use " + instead);
  }
  int64_t text_bytes = 0;
  for (int64_t b : train.bytes)
    text_bytes += b;
  if (m == "bpb" && text_bytes == 0) {
    throw Error(ErrorKind::Config,
                flag + " " + verb +
                    " bits per byte, but token files do not say how many bytes of text their "
                    "tokens are",
                "use " + instead + " (per token)");
  }
  const bool has_validation = data.validation.size() > 0;
  if (watched.split == "val" && !has_validation) {
    throw Error(ErrorKind::Config, flag + " reads the validation split, and this run holds none",
                "add --val-size N, or write test_" + m + " (or " + m + ")");
  }
  if (watched.metric_in(has_validation).rfind("test_", 0) == 0 && data.test.size() == 0) {
    throw Error(ErrorKind::Config, flag + " reads the test split, and this data has none",
                "add --val-size N and write val_" + m + " (or " + m + ")");
  }
}

}  // namespace

void check_watched_metrics(const TrainConfig& config, const DatasetSplits& data) {
  const bool regression = data.train.is_regression();
  if (const std::optional<StopTarget> target = config.stop_target()) {
    check_metric_reported(*target, stop_target_flag(config), "stops on",
                          regression ? "--target val_rmse<=X" : "--target val_loss<=X", data);
  }
  const std::string other = regression ? "val_rmse" : "val_loss";
  const bool has_validation = data.validation.size() > 0;
  struct Watch {
    std::optional<WatchedMetric> metric;
    const char* flag;
    const char* verb;
  };
  const Watch watches[] = {{config.early_stop_metric(), "--early-stop", "watches"},
                           {config.keep_best_metric(), "--keep-best", "keeps the best"}};
  for (const auto& [watched, flag, verb] : watches) {
    if (!watched)
      continue;
    check_metric_reported(*watched, flag, verb, std::string(flag) + " " + other, data);
    // Choosing the run's end or its weights by the test split tunes on it: only when asked.
    if (watched->split.empty() && !has_validation) {
      throw Error(ErrorKind::Config,
                  std::string(flag) + " " + watched->name() +
                      " would decide on the test split, as this run holds no validation split",
                  std::string("add --val-size N to hold one out (the usual way), or write ") +
                      flag + " test_" + watched->metric + " to decide on the test split knowingly");
    }
  }
}

void measure_token_cut(ResolvedRun& run, const TrainConfig& config, const TensorDataset& train) {
  if (config.micro_batch_tokens <= 0 || !train.is_tokens() || train.size() == 0)
    return;
  const auto order =
      epoch_order(config.seed, 0, train.size(), config.shuffle ? Shuffle::On : Shuffle::Off);
  run.token_cut = cut_epoch_by_tokens(run.plan, run.epoch, order, train.lengths,
                                      config.micro_batch_tokens, /*rank=*/0);
}

PixelNormalisation idx_pixels(const TrainConfig& config) {
  if (config.pixel_std > 0)
    return {config.pixel_mean, config.pixel_std};
  return {kFashionMnistPixelMean, kFashionMnistPixelStd};
}

int64_t largest_useful_micro_batch(const TrainConfig& config, int64_t world_size) {
  int64_t global = config.global_batch.value_or(kDefaultGlobalBatchSize);
  // The automatic batch starts at the micro-batch: at most the largest it may grow to.
  if (config.global_batch_auto && config.max_global_batch > 0)
    global = config.max_global_batch;
  if (!config.global_batch_schedule.empty()) {
    const auto steps = GlobalBatchSchedule::parse(config.global_batch_schedule).steps();
    global = std::min_element(steps.begin(), steps.end(), [](const auto& a, const auto& b) {
               return a.global_batch < b.global_batch;
             })->global_batch;
  }
  return std::max<int64_t>(1, global / world_size);
}

FitResult measure_micro_batch_fit(const TrainConfig& config, const TensorDataset& data,
                                  int64_t max_micro_batch,
                                  const std::function<void(int64_t, bool)>& on_probe,
                                  const ModelFactory& make_model) {
  FitOptions options;
  options.device = accounted_memory_device();
  options.budget_bytes = config.memory_budget > 0   ? config.memory_budget
                         : options.device.is_cuda() ? device_memory_available(options.device)
                                                    : available_memory_bytes();
  if (options.budget_bytes <= 0) {
    throw Error(ErrorKind::Memory, "the available memory could not be read",
                "give the budget with --memory-budget SIZE");
  }
  options.margin = config.fit_margin;
  options.max_micro_batch = max_micro_batch;
  options.on_probe = on_probe;
  const ModelFactory factory =
      make_model ? make_model : ModelFactory([&] { return build_model(config, data); });
  return fit_micro_batch(factory, OptimizerSettings::from(config), data, options);
}

namespace {

// Whether `candidate`'s fastest size beats `current`'s by more than their noise.
bool clearly_faster(const FitResult& candidate, const FitResult& current) {
  const FitProbe* a = candidate.row(candidate.fastest_micro_batch);
  const FitProbe* b = current.row(current.fastest_micro_batch);
  if (!a || !b || a->samples_per_s <= 0 || b->samples_per_s <= 0)
    return false;
  const double noise = std::max({0.03, a->spread(), b->spread()});
  return a->samples_per_s > b->samples_per_s * (1 + noise);
}

}  // namespace

FitChoice measure_fit_choice(const TrainConfig& config, const TensorDataset& data,
                             int64_t max_micro_batch, RecomputeProbe when,
                             const std::function<void(int64_t, bool)>& on_probe,
                             const ModelFactory& make_model) {
  FitChoice choice;
  choice.plain = measure_micro_batch_fit(config, data, max_micro_batch, on_probe, make_model);
  const bool recomputable = config.model == "gpt" && !config.recompute && !make_model;
  if (!recomputable ||
      (when == RecomputeProbe::WhenNothingFits && choice.plain.max_micro_batch > 0))
    return choice;
  TrainConfig recomputing = config;
  recomputing.recompute = true;
  choice.recomputed = measure_micro_batch_fit(recomputing, data, max_micro_batch, on_probe);
  const FitResult& r = *choice.recomputed;
  choice.recompute = r.max_micro_batch > 0 &&
                     (choice.plain.max_micro_batch == 0 || clearly_faster(r, choice.plain));
  return choice;
}

}  // namespace bigbatch
