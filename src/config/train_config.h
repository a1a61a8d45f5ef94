#pragma once
// Everything a training run needs, as one typed struct read once at start (libtorch's
// *Options structs). The CLI and the TOML file fill it through config/option_table.h; the
// resolved struct is written to the run directory as config.toml, so a run can be repeated
// with `bigbatch train --config runs/x/config.toml`.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batching/batch_plan.h"
#include "config/device_choice.h"
#include "config/modes.h"
#include "config/stop_target.h"
#include "console/progress.h"
#include "data/token_dtype.h"
#include "models/model_choices.h"
#include "schedule/batch_growth.h"
#include "schedule/interval.h"
#include "schedule/lr_schedule.h"

namespace bigbatch {

// The default rate: SGD with Nesterov momentum 0.9 on the default job (cnn, Fashion-MNIST) at
// its global batch of 256. Other batches scale it (--lr-scaling); docs/benchmarks.md's
// learning-rate limits give how far each rule held for each built-in model.
inline constexpr double kDefaultLr = 0.05;
inline constexpr int64_t kDefaultLrRefBatch = 256;

inline constexpr const char* kFashionMnistDirectory = "/usr/share/datasets/fashion-mnist";
// Fashion-MNIST's training-set pixel mean and standard deviation (of pixel / 255): what runs
// from before the normalisation was measured and recorded used for every IDX dataset.
inline constexpr double kFashionMnistPixelMean = 0.2860;
inline constexpr double kFashionMnistPixelStd = 0.3530;

struct TrainConfig {
  // Model and data.
  std::string model = "cnn";                 // a name of builtin_model_names()
  std::vector<int64_t> hidden = {512, 256};  // mlp hidden layer widths
  // BatchNorm under accumulation (models/models.h): per micro-batch, pooled over the window,
  // or frozen; --norm batch keeps the model's BatchNorm layers, group rewrites them as GroupNorm.
  BatchNormMode bn_mode = BatchNormMode::Micro;
  NormKind norm = NormKind::Batch;
  bool bn_momentum_correction = true;     // running statistics keep their horizon in updates
  std::string dataset = "fashion-mnist";  // or idx:DIR, npy:DIR, text:PATH, jsonl:FILE, tokens:PATH
  TaskKind task = TaskKind::Auto;         // resolved by task_kind()
  // Text (text:PATH): documents cut on this separator line ("%", "blank", "line" or a line),
  // as samples of --seq-len tokens (documents, or packed blocks).
  std::string doc_separator = "%";
  std::string text_field = "text";  // jsonl:FILE: the document's field
  SequenceMode sequences = SequenceMode::Auto;
  int64_t seq_len = 256;
  // Token files (tokens:PATH, data/token_files.h): the dtype of headerless files, and the
  // vocabulary (0: the largest id + 1).
  TokenDtype token_dtype = TokenDtype::Auto;
  int64_t vocab_size = 0;
  // Token files that are one stream (llm.c, headerless): the id that ends each document, for
  // --sequences documents (then its auto); -1: none.
  int64_t eot_id = -1;
  // IDX images enter as (pixel / 255 - pixel_mean) / pixel_std; 0, 0: measured on the training
  // images, and recorded in config.toml (so reruns, resumes and evaluation feed the same).
  double pixel_mean = 0;
  double pixel_std = 0;
  // Text (text:PATH, jsonl:FILE): "byte", or "sentencepiece:FILE.model" (data/tokenizer.h).
  std::string tokenizer = "byte";
  // gpt (models/gpt.h).
  int64_t layers = 4;
  int64_t d_model = 128;
  int64_t heads = 4;
  double dropout = 0.0;
  // The blocks' activations recomputed in the backward pass instead of kept (models/recompute.h).
  bool recompute = false;
  int64_t train_subset = 0;  // 0: the whole training set
  int64_t val_size = 0;      // held out from the end of the training set

  // The batch plan (any two of the three; see batching/batch_plan.h).
  std::optional<int64_t> global_batch;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> accum_steps;
  // Batch-size ramp-up (schedule/batch_schedule.h), normalised text; empty: a fixed batch.
  std::string global_batch_schedule;
  // --global-batch auto (schedule/batch_growth.h): start at micro x accumulation (default 2 in
  // one process) x ranks and double the global batch while the noise scale and the update's
  // cost say it pays, up to max_global_batch (0: 64 times the start, at most the training set),
  // when the predicted goodput gain is at least growth_threshold; update_cost in samples of
  // compute (unset: timed).
  bool global_batch_auto = false;
  int64_t max_global_batch = 0;
  double growth_threshold = 0.05;
  std::optional<double> update_cost;
  // How a proposed doubling is confirmed: by training both batches on the same samples from
  // the same point and comparing their losses on growth_holdout training samples set aside
  // (unset: schedule/batch_growth.h's default under the branch test, else none), the doubled
  // batch kept when it makes at least 1 - growth_tolerance of the current one's progress; or not
  // at all. A replay sets the same samples aside.
  GrowthTest growth_test = GrowthTest::Branch;
  // Where in the noise scale's band a doubling's goodput is predicted (schedule/batch_growth.h).
  GrowthPrediction growth_predict_at = GrowthPrediction::BandLow;
  // What the doubled branch is compared with (schedule/batch_growth.h).
  GrowthControl growth_control = GrowthControl::Rate;
  double growth_tolerance = 0.1;
  double growth_confidence = 2;  // standard errors the difference must clear the bound by
  // The most the branch tests may throw away, as a fraction of the samples trained: a test is
  // proposed only when, lost in full, it keeps the losing branches' samples within it.
  double growth_test_budget = 0.05;
  std::optional<int64_t> growth_holdout;
  // The samples the run sets aside from the training set (growth_holdout resolved against
  // `training_samples`, the training set before it).
  int64_t growth_holdout_samples(int64_t training_samples) const;
  LastWindow last_window = LastWindow::Keep;
  // --micro-batch auto: the trainer measures the micro-batch that fits --memory-budget (see
  // train/micro_batch_fit.h) and derives accumulation for the global batch.
  bool micro_batch_auto = false;
  // --micro-batch-tokens (token rows): micro-batches cut inside each window by padded tokens
  // (rows x longest) instead of by rows; 0: by --micro-batch.
  int64_t micro_batch_tokens = 0;
  // Any change to the effective batch (a short last window, a back-off that cannot keep it) is
  // an error instead of a warning.
  bool strict_batch = false;

  // Memory (memory/tracking_allocator.h): 0 means no budget.
  int64_t memory_budget = 0;  // bytes
  double fit_margin = 0.1;    // the chosen micro-batch's peak stays under budget x (1 - margin)

  // Optimizer and learning rate.
  OptimizerKind optimizer = OptimizerKind::Sgd;
  // Unset: the default rate, kDefaultLr, which was tuned at kDefaultLrRefBatch (the default
  // job's global batch) and is scaled from there. A rate given without --lr-ref-batch is taken
  // as tuned at the run's global batch. base_lr() and lr_reference() say which.
  std::optional<double> lr;
  std::optional<int64_t> lr_ref_batch;
  LrScaling lr_scaling = LrScaling::Auto;  // sqrt; linear for lars (resolve_lr_scaling)
  // Malladi's beta/eps adjustments with the sqrt rule (--adam-sqrt-adjust, --no-adam-sqrt-adjust);
  // unset: adam_sqrt_adjust_on() says the default.
  std::optional<bool> adam_sqrt_adjust;
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 5e-4;
  double clip_norm = 0.0;  // 0: no clipping
  // The training cross-entropy's label smoothing (0: none); evaluations stay unsmoothed.
  double label_smoothing = 0.0;
  bool noise_scale = true;  // measure the gradient noise scale (stats/gradient_noise.h)
  // Of the raw or the preconditioned gradient (auto: preconditioned for adamw and lamb).
  NoiseGradient noise_gradient = NoiseGradient::Auto;
  bool preconditioned_noise() const {
    return noise_gradient == NoiseGradient::Preconditioned ||
           (noise_gradient == NoiseGradient::Auto &&
            (optimizer == OptimizerKind::AdamW || optimizer == OptimizerKind::Lamb));
  }
  // A background thread gathers the window's next micro-batch (data/dataset.h).
  bool prefetch = false;
  // TensorBoard event files in the run directory (report/tensorboard_log.h).
  bool tensorboard = true;
  // Keep denormal floats (x86 FTZ/DAZ off): slower, bit-for-bit IEEE (train/run_setup.h).
  bool keep_denormals = false;
  Precision precision = Precision::Fp32;  // bf16: autocast forward, fp32 weights and gradients
  // Where the model, its batches, gradients and optimizer state live (device/device.h).
  DeviceChoice device;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double lars_trust = 0.001;  // LARS's trust coefficient (eta in the paper)
  Interval warmup = Interval::updates(0);
  double warmup_start_factor = 0.0;
  // --schedule-length: the decay's length when it is not the run's (none: the run's); past it
  // the rate holds its final value.
  std::optional<Interval> schedule_length;
  ScheduleKind schedule = ScheduleKind::Cosine;
  double min_lr_factor = 0.0;
  std::vector<Interval> step_milestones;
  double step_gamma = 0.1;

  // Length: whichever ends first.
  int64_t epochs = 8;
  std::optional<int64_t> max_updates;
  double target_accuracy = 0;  // stop at the first epoch whose validation accuracy reaches it
  // --target: stop at the first epoch whose metric reaches it (config/stop_target.h), e.g.
  // "val_bpb<=1.9"; empty: none (--target-accuracy is the shorthand for accuracy).
  std::string target;
  // --early-stop: the metric (config/stop_target.h, WatchedMetric) whose lack of improvement
  // for `patience` evaluations in a row ends the run; an improvement must exceed `min_delta`.
  std::string early_stop;
  int64_t patience = 3;
  double min_delta = 0;
  // --keep-best: the metric whose best evaluation's weights RUN/best.safetensors holds.
  std::string keep_best;

  // Run.
  uint64_t seed = 42;
  bool shuffle = true;
  int64_t threads = 0;  // 0: auto
  // Not an option: a resumed run's thread count is its config.toml's (measured or set when it
  // started), not a flag of this command; what the start's "threads:" line names.
  bool threads_from_run = false;
  std::string out;  // empty: runs/<timestamp>
  std::string init_weights;
  std::string save_weights;
  ProgressMode progress = ProgressMode::Auto;

  // Faults.
  int64_t max_bad_updates = 5;  // skipped updates in a row before the run stops
  // An update whose loss exceeds this times the median of the recent applied ones is skipped
  // like a non-finite one (stats/loss_spikes.h); 0: only non-finite updates are.
  double spike_factor = 10;

  // Evaluation on an interval, between the epoch ends (which always evaluate); 0: off.
  Interval eval_every = Interval::updates(0);

  // Checkpoints.
  std::string checkpoint_every;  // a Cadence ("200u", "1e", "30min"); empty: only at the end
  int64_t keep_checkpoints = 3;
  std::string resume;  // a run directory or checkpoint directory to continue
  // --resume from an older checkpoint: move the run's newer checkpoints aside (they belong to
  // the history this resume abandons) instead of refusing.
  bool discard_newer = false;

  // Data parallelism (ranks come from the launcher's environment, see dist/environment.h).
  double dist_timeout = 300;  // seconds: rendezvous and every collective
  double bucket_mb = 25;      // gradient all-reduce bucket size
  // Each rank keeps and steps the optimizer state of its share of the parameters, then the
  // owners broadcast the new values (optim/optimizer_shards.h): bit for bit the unsharded run.
  bool shard_optimizer = false;

  // Throws bigbatch::Error (Config) on values that cannot work, naming the fix.
  void validate() const;
  // A run's own config.toml, read to resume or evaluate it: one from before the IDX
  // normalisation was recorded gets the constants that run trained with (not a measurement).
  void complete_older_run();
  // This configuration with every file it reads (the dataset, module, tokenizer, initial
  // weights) named by an absolute path, so that a run's config.toml and checkpoints work from any
  // directory. What it writes (--out, --save-weights) stays relative: a rerun writes where it runs.
  TrainConfig with_absolute_paths() const;

  BatchRequest batch_request(int64_t world_size) const;

  // The base rate, and the batch it was tuned at for a run whose (first) global batch is
  // `run_global_batch`: --lr-ref-batch; else kDefaultLrRefBatch for the default rate, the global
  // batch itself for a given one.
  double base_lr() const { return lr.value_or(kDefaultLr); }
  int64_t lr_reference(int64_t run_global_batch) const {
    return lr_ref_batch ? *lr_ref_batch : lr ? run_global_batch : kDefaultLrRefBatch;
  }
  // Why the rate's reference batch is what it is, for the start line and the plan: "the
  // default rate's", "as given at the global batch", or empty for --lr-ref-batch.
  std::string lr_reference_note() const;
  // The default rate written out (lr and its reference batch), so that config.toml reruns
  // and resumes the run with the very rate it trained at.
  void resolve_default_rate() {
    if (!lr) {
      lr = kDefaultLr;
      if (!lr_ref_batch)
        lr_ref_batch = kDefaultLrRefBatch;
    }
  }
  // --adam-sqrt-adjust or --no-adam-sqrt-adjust as given; unset, on for adamw under
  // --global-batch auto with the square-root rule (on both AdamW workloads the automatic batch
  // reached the target in every seed with the betas following it and took fewer updates;
  // without, it missed once: docs/benchmarks.md), off elsewhere.
  bool adam_sqrt_adjust_on() const;
  // On by that default rather than by the flag: what a message names as its cause.
  bool adam_sqrt_adjust_by_default() const { return !adam_sqrt_adjust && adam_sqrt_adjust_on(); }
  // The dataset directory named by `dataset` (fashion-mnist, idx:DIR, npy:DIR).
  std::string dataset_directory() const;
  // text:PATH or jsonl:FILE, and its path.
  bool is_jsonl_dataset() const { return dataset.rfind("jsonl:", 0) == 0; }
  // npy:DIR: numpy arrays (data/dataset.h, load_npy_dataset).
  bool is_npy_dataset() const { return dataset.rfind("npy:", 0) == 0; }
  bool is_text_dataset() const { return dataset.rfind("text:", 0) == 0 || is_jsonl_dataset(); }
  // tokens:PATH: pre-tokenised files.
  bool is_token_file_dataset() const { return dataset.rfind("tokens:", 0) == 0; }
  // Text or token files: token sequences, a language model's data.
  bool is_sequence_dataset() const { return is_text_dataset() || is_token_file_dataset(); }
  // The path after text:, jsonl: or tokens:.
  std::string text_path() const { return dataset.substr(dataset.find(':') + 1); }
  // --tokenizer sentencepiece:FILE: FILE; empty for the byte tokenizer (or a bad spelling,
  // which validate() refuses).
  std::string sentencepiece_model() const;
  // --target, or --target-accuracy as one; none when neither is set.
  std::optional<StopTarget> stop_target() const;
  // --early-stop's and --keep-best's metrics; none when not set.
  std::optional<WatchedMetric> early_stop_metric() const;
  std::optional<WatchedMetric> keep_best_metric() const;
  // --sequences, with auto resolved: documents for text, packed for token files.
  SequenceMode sequence_mode() const;
  // --task, or the dataset's (text, tokens: lm; images: classify).
  TaskKind task_kind() const;
};

}  // namespace bigbatch
