#include "config/train_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

namespace bigbatch {

namespace {

// "a\nb" -> "a\\nb": a value with line breaks shown on the one line of an error.
std::string escape_line_breaks(const std::string& text) {
  std::string out;
  for (const char c : text)
    out += c == '\n' ? std::string("\\n") : c == '\r' ? std::string("\\r") : std::string(1, c);
  return out;
}

}  // namespace

void TrainConfig::complete_older_run() {
  // A run's config.toml names the rule it resolved to; `auto` there is an older run's, whose
  // auto meant linear for SGD and LARS, the square root for AdamW and LAMB. Resumed with that
  // rule, it continues at the rates it trained at.
  if (lr_scaling == LrScaling::Auto) {
    lr_scaling = optimizer == OptimizerKind::AdamW || optimizer == OptimizerKind::Lamb
                     ? LrScaling::Sqrt
                     : LrScaling::Linear;
  }
  const bool idx = !is_sequence_dataset() && !is_npy_dataset() && !is_custom(dataset);
  if (idx && pixel_std == 0) {
    pixel_mean = kFashionMnistPixelMean;
    pixel_std = kFashionMnistPixelStd;
  }
}

namespace {

// The prefix an existing path given bare to --dataset wants, by what it holds ("" when the
// name is not an existing path, or has a prefix already).
std::string dataset_prefix_for(const std::string& dataset) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (dataset == "fashion-mnist" || dataset.find(':') != std::string::npos ||
      !fs::exists(dataset, error))
    return {};
  const auto ends_with = [&](const std::string& suffix) {
    return dataset.size() >= suffix.size() &&
           dataset.compare(dataset.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (!fs::is_directory(dataset, error)) {
    if (ends_with(".npz"))
      return "npy:";
    if (ends_with(".jsonl"))
      return "jsonl:";
    if (ends_with(".bin") || ends_with(".npy"))
      return "tokens:";
    return "text:";
  }
  if (fs::exists(fs::path(dataset) / "x_train.npy", error))
    return "npy:";
  for (const auto& entry : fs::directory_iterator(dataset, error)) {
    if (entry.path().filename().string().find("-idx3-ubyte") != std::string::npos)
      return "idx:";
  }
  return "text:";
}

}  // namespace

void TrainConfig::validate() const {
  if (is_custom(model)) {
    // A program's own model (train/custom_problem.h): C++ or Python.
  } else if (is_torchscript_model(model)) {
    check_config(!torchscript_path(model).empty(), "--model " + model + " names no file",
                 "e.g. --model torchscript:model.pt, saved by torch.jit.script(m).save()");
  } else {
    // A file given as a name: say how a file is given.
    const bool file_like = model.find('/') != std::string::npos ||
                           (model.size() > 3 && model.compare(model.size() - 3, 3, ".pt") == 0);
    check_config(!file_like,
                 "--model " + model +
                     " is not a built-in model, and a TorchScript file is given "
                     "with its prefix",
                 "use --model torchscript:" + model);
    builtin_model_names().parse(model);  // throws, naming the models there are
  }
  check_config(!hidden.empty(), "--hidden is empty", "give layer widths such as --hidden 512,256");
  for (int64_t width : hidden) {
    check_config(width > 0, "--hidden width " + std::to_string(width) + " is not positive",
                 "give positive layer widths such as --hidden 512,256");
  }
  check_config(
      global_batch_schedule.empty() || (!global_batch && !accum_steps),
      std::string("--global-batch-schedule sets the global batch and derives accumulation, so ") +
          (global_batch ? "--global-batch" : "--accum-steps") + " cannot be given too",
      std::string("drop ") + (global_batch ? "--global-batch" : "--accum-steps") +
          "; the micro-batch (--micro-batch) stays the same in every step");
  check_config(noise_gradient != NoiseGradient::Preconditioned ||
                   optimizer == OptimizerKind::AdamW || optimizer == OptimizerKind::Lamb,
               "--noise-gradient preconditioned measures the gradient times adamw's or lamb's "
               "preconditioner, but the optimizer is " +
                   std::string(to_string(optimizer)) + ", which has none",
               "use --noise-gradient raw (or auto), or --optimizer adamw");
  if (global_batch_auto) {
    check_config(!global_batch, "--global-batch is both a number and auto", "keep one of them");
    check_config(global_batch_schedule.empty(),
                 "--global-batch auto and --global-batch-schedule both choose the batch",
                 "use one: auto measures when to double, the schedule is written by hand");
    check_config(lr_scaling != LrScaling::AdaScale,
                 "--global-batch auto and --lr-scaling adascale both adapt to the batch",
                 "use --lr-scaling linear or sqrt with --global-batch auto");
    check_config(noise_scale,
                 "--global-batch auto decides from the gradient noise scale, which "
                 "--no-noise-scale turns off",
                 "drop --no-noise-scale");
    check_config(!max_updates,
                 "--global-batch auto counts the run in samples, and its updates shrink as the "
                 "batch grows: --max-updates cannot bound it",
                 "give --epochs instead");
    check_config(last_window == LastWindow::Keep,
                 "--global-batch auto keeps every epoch's samples (--last-window keep), so the "
                 "batches it takes replay exactly as a --global-batch-schedule",
                 "drop --last-window drop");
    check_config(max_global_batch >= 0, "--max-global-batch must be zero (auto) or positive",
                 "e.g. --max-global-batch 4096");
    check_config(growth_threshold >= 0 && std::isfinite(growth_threshold),
                 "--growth-threshold must be zero or positive",
                 "e.g. --growth-threshold 0.05 (a 5% predicted goodput gain)");
    check_config(!update_cost || (*update_cost >= 0 && std::isfinite(*update_cost)),
                 "--update-cost must be zero or positive samples of compute",
                 "e.g. --update-cost 40, or auto to time it");
    check_config(growth_tolerance >= 0 && std::isfinite(growth_tolerance),
                 "--growth-tolerance must be zero or positive",
                 "e.g. --growth-tolerance 0.1 (the doubled batch makes at least 90% of the "
                 "progress)");
    check_config(growth_confidence >= 0 && std::isfinite(growth_confidence),
                 "--growth-confidence must be zero or positive",
                 "e.g. --growth-confidence 2 (the difference plus two standard errors within the "
                 "bound)");
    check_config(growth_test_budget > 0 && growth_test_budget <= 1,
                 "--growth-test-budget must be a fraction of the samples trained, above 0 and at "
                 "most 1",
                 "e.g. --growth-test-budget 0.05 (the tests throw away at most 5% of the samples "
                 "trained)");
    check_config(growth_test != GrowthTest::Branch || !growth_holdout || *growth_holdout != 0,
                 "--growth-test branch scores both branches on training samples set aside, and "
                 "--growth-holdout 0 sets none aside",
                 "give --growth-holdout N (default 2% of the training set), or --growth-test none");
  } else {
    check_config(max_global_batch == 0 && growth_threshold == 0.05 && !update_cost &&
                     growth_test == GrowthTest::Branch && growth_tolerance == 0.1 &&
                     growth_confidence == 2 && growth_control == GrowthControl::Rate &&
                     growth_test_budget == 0.05 && growth_predict_at == GrowthPrediction::BandLow,
                 "--max-global-batch, --growth-threshold, --growth-predict-at, --update-cost, "
                 "--growth-test, --growth-tolerance, --growth-confidence, --growth-control and "
                 "--growth-test-budget belong to --global-batch auto",
                 "add --global-batch auto, or drop them");
  }
  check_config(!growth_holdout || *growth_holdout >= 0, "--growth-holdout must be zero or positive",
               "e.g. --growth-holdout 1000 (training samples set aside)");
  check_config(
      global_batch_schedule.empty() || lr_scaling != LrScaling::AdaScale,
      "--global-batch-schedule and --lr-scaling adascale both adapt to the batch: AdaScale's "
      "gain already follows a larger batch",
      "use one of them: a ramp with --lr-scaling linear or sqrt, or adascale at one batch");
  if (const std::string prefix = dataset_prefix_for(dataset); !prefix.empty()) {
    throw Error(ErrorKind::Config,
                "dataset '" + dataset + "' is a path without the prefix that says how to read it",
                "use --dataset " + prefix + dataset);
  }
  check_config(dataset == "fashion-mnist" || dataset.rfind("idx:", 0) == 0 || is_npy_dataset() ||
                   is_sequence_dataset() || is_custom(dataset),
               "dataset '" + dataset + "' is not known",
               "use --dataset fashion-mnist, idx:DIR (MNIST-format images), npy:DIR (numpy "
               "arrays x_train.npy, y_train.npy), text:PATH (a text file or a directory of "
               "them), jsonl:FILE (one JSON object per line) or tokens:PATH (Megatron, llm.c "
               "or nanoGPT token files)");
  check_config((!is_npy_dataset() && dataset.rfind("idx:", 0) != 0) || !dataset_directory().empty(),
               "--dataset " + dataset + " names no directory", "e.g. --dataset npy:data");
  check_config(!is_sequence_dataset() || !text_path().empty(),
               "--dataset " + dataset + " names no path",
               is_token_file_dataset() ? "e.g. --dataset tokens:data/train.bin"
                                       : "e.g. --dataset text:/usr/share/games/fortunes");
  check_config(tokenizer == "byte" || !sentencepiece_model().empty(),
               "tokenizer '" + tokenizer + "' is not known",
               "use --tokenizer byte or --tokenizer sentencepiece:FILE.model");
  check_config(tokenizer == "byte" || is_text_dataset(),
               "--tokenizer turns text into tokens, but dataset '" + dataset + "' is not text" +
                   (is_token_file_dataset() ? " (token files are tokenised already)" : ""),
               "drop --tokenizer, or use --dataset text:PATH or jsonl:FILE");
  check_config(vocab_size >= 0, "--vocab-size must be zero (the data's) or positive",
               "e.g. --vocab-size 50257");
  check_config(is_token_file_dataset() || (vocab_size == 0 && token_dtype == TokenDtype::Auto),
               std::string(vocab_size != 0 ? "--vocab-size" : "--token-dtype") +
                   " describes token files, but dataset '" + dataset + "' is not tokens:PATH",
               std::string("drop ") + (vocab_size != 0 ? "--vocab-size" : "--token-dtype") +
                   (is_text_dataset() ? " (text takes the byte tokenizer's 257)" : ""));
  check_config(eot_id >= -1, "--eot-id must be a token id (0 or more), or -1 for none",
               "e.g. --eot-id 50256 (GPT-2's end-of-text)");
  check_config(
      eot_id < 0 || is_token_file_dataset(),
      "--eot-id cuts token files into documents, but dataset '" + dataset + "' is not tokens:PATH",
      std::string("drop --eot-id") +
          (is_text_dataset() ? " (text is cut into documents by --doc-separator)" : ""));
  check_config(eot_id < 0 || sequences != SequenceMode::Packed,
               "--eot-id cuts the stream into documents, which --sequences packed joins again",
               "drop --eot-id to pack, or use --sequences documents");
  check_config(!text_field.empty(), "--text-field is empty", "e.g. --text-field text");
  // Flags of another kind of data would be ignored without a word, as if they had worked.
  check_config(
      text_field == "text" || is_jsonl_dataset(),
      "--text-field names the field of jsonl:FILE's records, but dataset '" + dataset +
          "' is not jsonl:FILE",
      "drop --text-field" + std::string(is_text_dataset() ? " (text files' documents are cut by "
                                                            "--doc-separator)"
                                                          : ""));
  check_config(doc_separator == "%" || (is_text_dataset() && !is_jsonl_dataset()),
               "--doc-separator cuts text:PATH files into documents, but dataset '" + dataset +
                   "' is not text:PATH",
               "drop --doc-separator" + std::string(is_jsonl_dataset()
                                                        ? " (a JSONL file's documents are its "
                                                          "records)"
                                                        : ""));
  check_config(task != TaskKind::Lm || is_sequence_dataset(),
               "--task lm needs token sequences, but dataset '" + dataset + "' holds images",
               "use --dataset text:PATH or tokens:PATH, or --task classify");
  check_config(task != TaskKind::Regress || is_npy_dataset() || is_custom(dataset),
               "--task regress needs value targets, which only npy:DIR datasets hold (dataset '" +
                   dataset + "')",
               "save inputs and float targets as x_train.npy and y_train.npy, and use "
               "--dataset npy:DIR");
  check_config(task != TaskKind::Regress || target_accuracy == 0,
               "--target-accuracy stops on accuracy, which a regression has none of",
               "drop --target-accuracy, or bound the run with --epochs or --max-updates");
  check_config(task != TaskKind::Classify || !is_sequence_dataset(),
               "--task classify needs labelled images, but dataset '" + dataset + "' is text",
               "use --task lm (or leave --task out) with --model gpt");
  if (is_torchscript_model(model) || is_custom(model)) {
    check_config(norm != NormKind::Group,
                 "--norm group rewrites the built-in models' BatchNorm layers; a TorchScript or "
                 "C++ module's layers are its own",
                 "use GroupNorm in the module itself, or drop --norm");
    check_config(bn_mode != BatchNormMode::Window,
                 "--bn-mode window pools BatchNorm statistics through the built-in layers, not "
                 "through a TorchScript or C++ module's",
                 "use --bn-mode micro (statistics per micro-batch) or frozen");
    // What it reads is known once it is loaded: its first batch checks it (train/run_setup.h).
  } else if (task_kind() == TaskKind::Lm) {
    check_config(is_sequence_model(model),
                 "model '" + model + "' classifies images; a language model (" + dataset +
                     ") needs a sequence model",
                 "use --model gpt");
  } else {
    check_config(!is_sequence_model(model),
                 "model '" + model + "' is a language model; dataset '" + dataset +
                     "' holds labelled images",
                 "use --model mlp, cnn, cnn-bn or cnn-gn, or --dataset text:PATH");
  }
  check_config(micro_batch_tokens >= 0, "--micro-batch-tokens must be zero (off) or positive",
               "e.g. --micro-batch-tokens 4096");
  check_config(micro_batch_tokens == 0 || task_kind() == TaskKind::Lm,
               "--micro-batch-tokens cuts micro-batches of token sequences, but dataset '" +
                   dataset + "' holds images",
               "use --micro-batch for images");
  check_config(micro_batch_tokens == 0 || micro_batch_tokens >= seq_len,
               "--micro-batch-tokens " + std::to_string(micro_batch_tokens) +
                   " is below --seq-len " + std::to_string(seq_len) +
                   ": a sequence of full length would not fit",
               "give at least --micro-batch-tokens " + std::to_string(seq_len));
  check_config(
      micro_batch_tokens == 0 || (!micro_batch && !accum_steps && !micro_batch_auto),
      "--micro-batch-tokens cuts the micro-batches itself, so --micro-batch and --accum-steps "
      "cannot be given too",
      "give --global-batch and --micro-batch-tokens");
  check_config(seq_len >= 2, "--seq-len must be at least 2, got " + std::to_string(seq_len),
               "e.g. --seq-len 256");
  // The position table and every batch buffer have a row per position, sized before any data
  // is read: a mistyped length would allocate for minutes, then fail.
  constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
  check_config(seq_len <= kMaxSeqLen,
               "--seq-len " + std::to_string(seq_len) + " is more than the " +
                   std::to_string(kMaxSeqLen) +
                   " positions bigbatch allots (the position table and each batch buffer hold a "
                   "row per position)",
               "give the longest row you need, e.g. --seq-len 1024: longer documents are cut, "
               "and packed blocks are --seq-len tokens");
  check_config(!doc_separator.empty(), "--doc-separator is empty",
               "give the separator line, e.g. --doc-separator %, or blank or line");
  // Text is cut into lines first, so a separator with a line break in it never matches; said
  // on one line, the break written as \n.
  check_config(doc_separator.find_first_of("\r\n") == std::string::npos,
               "--doc-separator '" + escape_line_breaks(doc_separator) +
                   "' holds a line break, and is matched against one line at a time",
               "give the separator's one line, e.g. --doc-separator %, or blank or line");
  check_config(layers >= 1, "--layers must be at least 1", "e.g. --layers 4");
  check_config(d_model >= 1 && heads >= 1 && d_model % heads == 0,
               "--d-model " + std::to_string(d_model) + " does not split into --heads " +
                   std::to_string(heads),
               "give a --d-model that --heads divides, e.g. --d-model 128 --heads 4");
  check_config(!recompute || model == "gpt",
               "--recompute recomputes the gpt's blocks; model '" + model +
                   "' has none that would save memory (an image model's peak is its first "
                   "layers' activations, made in either case)",
               "drop --recompute, or lower --micro-batch to fit the memory");
  check_config(dropout >= 0 && dropout < 1,
               "--dropout must be in [0, 1), got " + format_double(dropout), "e.g. --dropout 0.1");
  check_config(train_subset >= 0, "--train-subset must be zero (all) or positive",
               "e.g. --train-subset 1000");
  check_config(val_size >= 0, "--val-size must be zero or positive", "e.g. --val-size 5000");
  check_config(momentum >= 0 && momentum < 1,
               "--momentum must be in [0, 1), got " + format_double(momentum),
               "use e.g. --momentum 0.9");
  check_config(!nesterov || momentum > 0 || optimizer != OptimizerKind::Sgd,
               "--nesterov needs a positive --momentum", "pass --momentum 0.9, or drop --nesterov");
  check_config(weight_decay >= 0, "--weight-decay must be zero or positive",
               "use e.g. --weight-decay 5e-4");
  check_config(clip_norm >= 0, "--clip-norm must be zero (off) or positive",
               "use e.g. --clip-norm 1.0");
  check_config(label_smoothing >= 0 && label_smoothing < 1,
               "--label-smoothing must be in [0, 1), got " + format_double(label_smoothing),
               "use e.g. --label-smoothing 0.1");
  check_config(adam_beta1 >= 0 && adam_beta1 < 1 && adam_beta2 >= 0 && adam_beta2 < 1,
               "--adam-beta1 and --adam-beta2 must be in [0, 1)", "use e.g. 0.9 and 0.999");
  check_config(adam_eps > 0, "--adam-eps must be positive", "use e.g. --adam-eps 1e-8");
  check_config(lars_trust > 0, "--lars-trust must be positive", "use e.g. --lars-trust 0.001");
  check_config(epochs > 0 && epochs <= 1000000000,
               "--epochs must be from 1 to 1e9, got " + std::to_string(epochs),
               "use --epochs 1 or more, or bound the run with --max-updates");
  check_config(!max_updates || *max_updates >= 0, "--max-updates must be zero or positive",
               "use --max-updates 0 to write the initial weights only");
  check_config(threads >= 0, "--threads must be zero (auto) or positive", "e.g. --threads 2");
  if (!checkpoint_every.empty())
    Cadence::parse(checkpoint_every);  // throws with the fix
  check_config(max_bad_updates >= 1, "--max-bad-updates must be at least 1",
               "e.g. --max-bad-updates 5");
  check_config(spike_factor == 0 || (spike_factor > 1 && std::isfinite(spike_factor)),
               "--spike-factor must be 0 (off) or above 1, got " + format_significant(spike_factor),
               "e.g. --spike-factor 10 (the default), or 0 to skip only non-finite updates");
  check_config((pixel_mean == 0 && pixel_std == 0) || (pixel_std > 0 && std::isfinite(pixel_std) &&
                                                       pixel_mean >= 0 && pixel_mean <= 1),
               "--pixel-mean " + format_significant(pixel_mean) + " and --pixel-std " +
                   format_significant(pixel_std) +
                   " do not describe pixels / 255 (a mean in [0, 1], a positive deviation)",
               "give both, e.g. --pixel-mean 0.286 --pixel-std 0.353, or neither to measure them");
  check_config(keep_checkpoints >= 1, "--keep-checkpoints must be at least 1",
               "e.g. --keep-checkpoints 3");
  check_config(dist_timeout > 0, "--dist-timeout must be positive seconds",
               "e.g. --dist-timeout 300");
  check_config(bucket_mb > 0, "--bucket-mb must be positive", "e.g. --bucket-mb 25");
  check_config(!adam_sqrt_adjust.value_or(false) || optimizer == OptimizerKind::AdamW,
               "--adam-sqrt-adjust adjusts Adam's betas and epsilon, but the optimizer is " +
                   std::string(to_string(optimizer)),
               "add --optimizer adamw, or drop --adam-sqrt-adjust");
  if (!target.empty())
    StopTarget::parse(target);  // throws with the accepted forms
  check_config(target.empty() || target_accuracy == 0,
               "--target and --target-accuracy both say when to stop",
               "give one: --target val_accuracy>=X is --target-accuracy X");
  check_config(!schedule_length || !schedule_length->is_zero(),
               "--schedule-length must be longer than 0",
               "e.g. --schedule-length 10e, or leave it out to decay over the run's length");
  check_config(
      !schedule_length || schedule == ScheduleKind::Cosine || schedule == ScheduleKind::Linear,
      "--schedule-length sets where a cosine or linear decay ends, and the " +
          std::string(to_string(schedule)) + " schedule has no such end",
      "drop --schedule-length (a step schedule decays at its --step-milestones)");
  early_stop_metric();  // each throws with the accepted names
  keep_best_metric();
  check_config(patience >= 1,
               "--patience must be at least 1 evaluation, got " + std::to_string(patience),
               "e.g. --patience 3");
  check_config(std::isfinite(min_delta) && min_delta >= 0,
               "--min-delta must be a finite number >= 0, got " + format_double(min_delta),
               "e.g. --min-delta 0.001");
  check_config(!early_stop.empty() || (patience == 3 && min_delta == 0),
               "--patience and --min-delta tell --early-stop when to stop, and it is not set",
               "add --early-stop val_loss (or the metric to watch)");
  check_config(target_accuracy >= 0 && target_accuracy <= 1,
               "--target-accuracy must be a fraction from 0 (off) to 1, got " +
                   format_double(target_accuracy),
               "e.g. --target-accuracy 0.9 for 90%");
  check_config(fit_margin >= 0 && fit_margin < 1,
               "--fit-margin must be in [0, 1), got " + format_double(fit_margin),
               "use e.g. --fit-margin 0.1 (keep the peak 10% under the budget)");
  check_config(
      !micro_batch_auto || !accum_steps,
      "--micro-batch auto derives the accumulation steps, so --accum-steps cannot be given too",
      "drop --accum-steps and give --global-batch");
  check_config(schedule != ScheduleKind::Step || !step_milestones.empty(),
               "--schedule step needs --step-milestones", "e.g. --step-milestones 3e,6e");
}

bool TrainConfig::adam_sqrt_adjust_on() const {
  if (adam_sqrt_adjust)
    return *adam_sqrt_adjust;
  return global_batch_auto && optimizer == OptimizerKind::AdamW &&
         resolve_lr_scaling(lr_scaling, /*layer_wise_trust=*/false) == LrScaling::Sqrt;
}

std::string TrainConfig::lr_reference_note() const {
  if (schedule == ScheduleKind::RangeTest)
    return "the range test's rates, at this batch";
  // The default rate, left unset or written out by a run's config.toml: said alike, so that
  // plan --config RUN/config.toml prints the run's plan.txt to the byte.
  if (base_lr() == kDefaultLr &&
      lr_ref_batch.value_or(lr ? 0 : kDefaultLrRefBatch) == kDefaultLrRefBatch)
    return "the default rate's batch";
  if (!lr_ref_batch && lr)
    return "--lr taken as tuned at this batch; --lr-ref-batch B scales it from B";
  return "";
}

BatchRequest TrainConfig::batch_request(int64_t world_size) const {
  BatchRequest request;
  request.global_batch_size = global_batch;
  request.micro_batch_size = micro_batch;
  request.accumulation_steps = accum_steps;
  // Under a token budget the window is cut by tokens; the plan's micro-batch is the rank's
  // whole share (accumulation 1, nominal), which the buffers must hold.
  if (micro_batch_tokens > 0)
    request.accumulation_steps = 1;
  request.world_size = world_size;
  return request;
}

namespace {

// "npy:data" -> "npy:/home/u/data" for each prefix that names a path; other specs (fashion-mnist,
// mlp, byte, cpp:NAME) as they are.
std::string with_absolute_path(const std::string& spec, std::initializer_list<const char*> kinds) {
  for (const std::string kind : kinds) {
    const std::string prefix = kind + ":";
    if (spec.rfind(prefix, 0) == 0 && spec.size() > prefix.size())
      return prefix + absolute_path(spec.substr(prefix.size()));
  }
  return spec;
}

}  // namespace

TrainConfig TrainConfig::with_absolute_paths() const {
  TrainConfig absolute = *this;
  absolute.dataset = with_absolute_path(dataset, {"idx", "npy", "text", "jsonl", "tokens"});
  absolute.model = with_absolute_path(model, {"torchscript"});
  absolute.tokenizer = with_absolute_path(tokenizer, {"sentencepiece"});
  absolute.init_weights = absolute_path(init_weights);
  return absolute;
}

std::string TrainConfig::sentencepiece_model() const {
  const std::string prefix = "sentencepiece:";
  return tokenizer.rfind(prefix, 0) == 0 ? tokenizer.substr(prefix.size()) : std::string();
}

std::optional<WatchedMetric> TrainConfig::early_stop_metric() const {
  if (early_stop.empty())
    return std::nullopt;
  return WatchedMetric::parse(early_stop, "--early-stop");
}

std::optional<WatchedMetric> TrainConfig::keep_best_metric() const {
  if (keep_best.empty())
    return std::nullopt;
  return WatchedMetric::parse(keep_best, "--keep-best");
}

std::optional<StopTarget> TrainConfig::stop_target() const {
  if (!target.empty())
    return StopTarget::parse(target);
  if (target_accuracy > 0)
    return StopTarget::accuracy(target_accuracy);
  return std::nullopt;
}

SequenceMode TrainConfig::sequence_mode() const {
  if (sequences != SequenceMode::Auto)
    return sequences;
  // Token files pack, as Megatron's and llm.c's loaders do, unless their documents are asked
  // for by the id that ends them.
  return is_token_file_dataset() && eot_id < 0 ? SequenceMode::Packed : SequenceMode::Documents;
}

TaskKind TrainConfig::task_kind() const {
  if (task != TaskKind::Auto)
    return task;
  return is_sequence_dataset() ? TaskKind::Lm : TaskKind::Classify;
}

std::string TrainConfig::dataset_directory() const {
  if (dataset == "fashion-mnist")
    return kFashionMnistDirectory;
  return dataset.substr(dataset.find(':') + 1);  // idx:DIR, npy:DIR
}

int64_t TrainConfig::growth_holdout_samples(int64_t training_samples) const {
  if (growth_holdout)
    return *growth_holdout;
  return global_batch_auto && growth_test == GrowthTest::Branch
             ? default_growth_holdout(training_samples)
             : 0;
}

}  // namespace bigbatch
