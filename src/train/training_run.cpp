#include "train/training_run.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/sampler.h"
#include "device/device.h"
#include "device/resources.h"
#include "device/thread_tuning.h"
#include "dist/collective_reducer.h"
#include "dist/rank_agreement.h"
#include "io/safetensors.h"
#include "models/models.h"
#include "models/scripted_model.h"
#include "models/user_module.h"
#include "optim/optimizer.h"
#include "report/plan_report.h"
#include "report/run_records.h"
#include "report/run_start.h"
#include "runtime/runtime_env.h"
#include "train/micro_batch_fit.h"
#include "train/run_agreement.h"
#include "train/run_directory.h"
#include "train/run_engine.h"
#include "train/run_resume.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// Class labels that training cannot learn from: held-out classes it never sees, and a class
// count (the largest label + 1) that is mostly empty — a label file of another dataset, or a
// subset cut along the labels. Said (as warnings at the start), not refused: the data may mean
// it.
std::vector<std::string> class_coverage_warnings(const DatasetSplits& data) {
  std::vector<std::string> warnings;
  const TensorDataset& train = data.train;
  if (train.is_tokens() || train.is_regression() || train.classes <= 0 || train.size() == 0)
    return warnings;
  const auto present = [&](const TensorDataset& split) {
    // Labels per position: those of every position but the padding.
    const torch::Tensor labels = split.targets.to(torch::kInt64).reshape({-1});
    return torch::bincount(labels.masked_select(labels.ne(kIgnoreTarget)), {}, train.classes).gt(0);
  };
  const torch::Tensor trained = present(train);
  const int64_t seen = trained.sum().item<int64_t>();
  if (seen == 1) {
    const int64_t only = trained.nonzero()[0][0].item<int64_t>();
    warnings.push_back("the training labels use 1 of " + std::to_string(train.classes) +
                       (train.classes == 1 ? " class" : " classes") + " (every label is " +
                       std::to_string(only) +
                       "): the model can only learn to answer it; check the label file (or, for "
                       "regression, save the targets as floating point)");
  } else if (seen * 2 < train.classes) {
    warnings.push_back(
        "the training labels use " + std::to_string(seen) + " of " + std::to_string(train.classes) +
        " classes (the largest label + 1); the model learns only those: check that the "
        "label files belong to these images");
  }
  for (const auto& [name, split] :
       {std::pair{"validation", &data.validation}, {"test", &data.test}}) {
    if (split->size() == 0)
      continue;
    const torch::Tensor unseen = present(*split).logical_and(trained.logical_not()).nonzero();
    if (unseen.numel() == 0)
      continue;
    std::vector<std::string> shown;
    for (int64_t i = 0; i < std::min<int64_t>(unseen.size(0), 5); ++i)
      shown.push_back(std::to_string(unseen[i][0].item<int64_t>()));
    warnings.push_back("the " + std::string(name) + " split has " + std::to_string(unseen.size(0)) +
                       (unseen.size(0) == 1 ? " class" : " classes") +
                       " that training never sees (" + join(shown, ", ") +
                       (unseen.size(0) > 5 ? ", ..." : "") +
                       "): its accuracy cannot reach 100%; check the labels or the split");
  }
  return warnings;
}

void announce_run(const TrainingRun& r, bool flushing_denormals, Console& console) {
  RunStart start(r.config, r.resolved);
  start.train_samples = r.data.train.size();
  start.validation_samples = r.data.validation.size();
  start.test_samples = r.data.test.size();
  start.controller_samples = r.data.controller.size();
  start.world_size = r.job.world_size;
  if (r.job.env)
    start.ranks_source = r.job.env->source;
  start.device = describe_device(r.device);
  start.cpu = libtorch_description() + ", " + runtime_environment_summary() +
              (flushing_denormals ? ", denormals flushed to zero" : ", denormals kept");
  start.data_description = r.data.description;
  start.class_warnings = class_coverage_warnings(r.data);
  start.data_warnings = r.data.warnings;
  for (const std::string& line : run_start_lines(start))
    console.say(line);
}

// What accumulation does to this model's BatchNorm, said before the first update.
void announce_batch_norm(TrainingRun& r, double bn_momentum, Console& console) {
  const TrainConfig& config = r.config;
  const BatchPlan& plan = r.resolved.plan;
  const bool batch_statistics = uses_batch_statistics(*r.model);
  if (config.bn_mode == BatchNormMode::Window && batch_statistics) {
    console.say("note: --bn-mode window: " + config.model +
                " normalises every micro-batch with the statistics of its whole window of " +
                std::to_string(plan.per_rank_batch_size()) + " samples" +
                (r.job.world_size > 1 ? " (each rank its share)" : "") +
                ", measured by a statistics pass per BatchNorm layer; the normalisation equals "
                "one big batch's, the gradient lacks the term through the statistics (bigbatch "
                "verify measures it)");
  } else if (batch_statistics && plan.accumulation_steps * plan.world_size > 1 &&
             as_user_module(*r.model)) {
    console.say("note: " + config.model + " normalises over each micro-batch of " +
                std::to_string(plan.micro_batch_size) + " samples in its BatchNorm layers (" +
                join(batch_statistics_layers(*r.model), ", ") +
                "), so its updates differ from one batch of " +
                std::to_string(plan.global_batch_size) +
                "; --bn-mode frozen makes them exact. Running statistics: the module's own "
                "momentum per micro-step, " +
                std::to_string(plan.accumulation_steps) + " steps per update");
  } else if (batch_statistics && plan.accumulation_steps * plan.world_size > 1) {
    console.say("note: " + config.model + " normalises over each micro-batch of " +
                std::to_string(plan.micro_batch_size) +
                " samples (ghost batch norm), so its updates differ from one batch of " +
                std::to_string(plan.global_batch_size) +
                "; --norm group or --bn-mode frozen make them exact. Running statistics: "
                "momentum " +
                format_significant(bn_momentum) + " per micro-step" +
                (config.bn_momentum_correction
                     ? " (= " + format_significant(kBatchNormMomentum) + " per update of " +
                           std::to_string(plan.accumulation_steps) + " micro-batches)"
                     : std::string(" (uncorrected)")));
  } else if (config.bn_mode == BatchNormMode::Frozen && config.norm == NormKind::Batch &&
             (has_batch_norm_layers(config.model) ||
              (as_user_module(*r.model) &&
               !as_user_module(*r.model)
                    ->layers_of(LayerKind::BatchNorm, /*training_only=*/false)
                    .empty()))) {
    console.say(
        "note: BatchNorm frozen: its running statistics normalise in training too, so "
        "accumulation equals one batch; from scratch they are the identity (mean 0, "
        "variance 1) — frozen suits fine-tuning from --init-weights");
  }
}

// The part of set_up_training after the run directory exists: what fails here removes it.
void finish_set_up(TrainingRun& r, const RankDescription& data_digests, Console& console) {
  TrainConfig& config = r.config;
  {
    // Every rank starts from rank 0's weights, whatever its seed or file did.
    std::vector<torch::Tensor> state;
    for (auto& named : model_state(*r.model))
      state.push_back(named.second);
    torch::NoGradGuard no_grad;
    r.reducer->broadcast_from_first_rank(state);
  }
  const double bn_momentum =
      prepare_for_training(r.model, config, r.resolved.plan.accumulation_steps);
  announce_batch_norm(r, bn_momentum, console);
  if (r.resolved.total_updates == 0)
    return;  // --max-updates 0: the initial weights are the result

  r.optimizer = build_optimizer(r, console);
  const TrainConfig absolute = config.with_absolute_paths();  // as config.toml names them
  r.identity = checkpoint_identity(absolute.model, config.hidden, absolute.dataset,
                                   r.data.train.size(), r.resolved.plan.global_batch_size,
                                   config.seed, config.shuffle, to_string(config.optimizer));
  if (is_sequence_model(config.model)) {
    // A language model's shape and samples: a resume under others is another run.
    r.identity["seq_len"] = config.seq_len;
    r.identity["layers"] = config.layers;
    r.identity["d_model"] = config.d_model;
    r.identity["heads"] = config.heads;
    r.identity["sequences"] = to_string(config.sequences);
    if (config.eot_id >= 0)
      r.identity["eot_id"] = config.eot_id;
    r.identity["vocabulary"] = r.data.train.vocabulary;
    const std::string model = config.sentencepiece_model();
    r.identity["tokenizer"] = model.empty() ? config.tokenizer : file_digest(model);
  }
  if (is_torchscript_model(config.model)) {
    // The module's code and initial weights: a resume under another file is another run.
    r.identity["model_file"] = file_digest(torchscript_path(config.model));
  }
  // The samples themselves: data changed in place keeps its path and size.
  std::string data_digest_text;
  for (const auto& [name, value] : data_digests) {
    if (name != "training samples")  // a count and a shape, which the other keys hold
      data_digest_text += (data_digest_text.empty() ? "" : " ") + value;
  }
  r.identity["training_data"] = data_digest_text;
  PartialWindow partial;
  if (r.resuming) {
    // Before anything of the run is read back or rewritten: a run still training there would
    // otherwise be mixed with this one.
    if (r.job.is_main()) {
      r.directory_lock = std::make_unique<DirectoryLock>(r.run_dir);
      if (const int64_t removed = remove_checkpoint_leftovers(r.run_dir)) {
        console.say("removed " + std::to_string(removed) + " unfinished checkpoint director" +
                    (removed == 1 ? "y" : "ies") + " left by an interrupted run");
      }
    }
    abandon_newer_history(r, console, /*move=*/false);
    resume_from_checkpoint(r, partial, console);
    if (r.finished)
      return;
    restart_watches_of_other_metrics(r, console);
    if (r.job.is_main())
      restore_best_weights(r, console);
  }
  if (r.job.is_main()) {
    // The events start from what metrics.jsonl kept (a resume has cut it back by now).
    std::vector<std::string> not_removed;
    if (config.tensorboard) {
      r.tensorboard = std::make_unique<TensorBoardLog>(r.run_dir, r.run_dir + "/metrics.jsonl");
      not_removed = r.tensorboard->not_removed();
    } else if (const int64_t removed =
                   r.resuming ? remove_event_files(r.run_dir, "", &not_removed) : 0) {
      console.say("--no-tensorboard: removed the run's " +
                  count_of(removed, "TensorBoard event file") +
                  " (they may show updates past the checkpoint)");
    }
    for (const std::string& file : not_removed) {
      console.say("warning: could not remove the older TensorBoard event file " + file +
                  ": TensorBoard reads it beside the new one and shows its updates twice (and "
                  "any past the checkpoint); remove it by hand");
    }
    r.metrics = std::make_unique<MetricsWriter>(r.run_dir + "/metrics.jsonl");
  }

  build_engine(r, partial, console);
  tune_threads(r, console);
}

std::map<std::string, std::string> weights_metadata(const TrainConfig& config, int64_t step) {
  std::vector<std::string> hidden;
  for (int64_t width : config.hidden)
    hidden.push_back(std::to_string(width));
  // How the inputs were prepared, so that a user of the weights can prepare theirs alike.
  const std::string inputs =
      config.is_text_dataset() && config.tokenizer == "byte" ? "byte tokens (256: end-of-text)"
      : config.is_text_dataset()                             ? "token ids of " + config.tokenizer
      : config.is_token_file_dataset()                       ? "token ids as in the token files"
      : config.is_npy_dataset()   ? "as saved in the .npy arrays (uint8 scaled to [0, 1])"
      : is_custom(config.dataset) ? "as the program's dataset gave them"
                                  : idx_pixels(config).describe() + ", shape [N, 1, H, W]";
  std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                 {"producer", "bigbatch"},
                                                 {"model", config.model},
                                                 {"step", std::to_string(step)},
                                                 {"inputs", inputs}};
  // The mlp's widths (what rebuilds it); other models' shapes are not --hidden's.
  if (config.model == "mlp")
    metadata["hidden"] = join(hidden, ",");
  // The sentencepiece model the ids mean something in: sample and evaluate refuse another under
  // its name (check_tokenizer_of_weights).
  if (const std::string model = config.sentencepiece_model(); !model.empty())
    metadata[kTokenizerDigestKey] = file_digest(model);
  if (config.pixel_std > 0) {
    // Exact (shortest round-trip), for a user who wants the very inputs of training.
    metadata["pixel_mean"] = format_double(config.pixel_mean);
    metadata["pixel_std"] = format_double(config.pixel_std);
  }
  return metadata;
}

}  // namespace

void TrainingRun::save_model_weights(const std::string& path, int64_t step,
                                     const std::map<std::string, std::string>& extra) const {
  auto meta = weights_metadata(config, step);
  // The samples' shape and targets: predict builds the model from them, without the data.
  meta.merge(sample_layout(data.train));
  for (const auto& [key, value] : extra)
    meta[key] = value;
  // The run directory's own files replace a link found there; --save-weights may be one.
  const Links links = path.rfind(run_dir + "/", 0) == 0 ? Links::Replace : Links::Follow;
  save_weights(path, *model.ptr(), meta, links);  // reads the weights; the holder is const
}

ResolvedRun TrainingRun::resolved_now() const {
  ResolvedRun now = resolved;
  now.plan = state.schedule->plan();
  now.epoch = state.schedule->epoch();
  return now;
}

void TrainingRun::discard_unstarted() {
  if (resuming || !job.is_main() || directory_lock == nullptr || state.at.step > 0)
    return;
  std::error_code ignored;
  const std::filesystem::path dir(run_dir);
  // remove() takes a directory only when it is empty: checkpoints keep the run.
  std::filesystem::remove(dir / "checkpoints", ignored);
  if (std::filesystem::exists(dir / "checkpoints", ignored))
    return;
  metrics.reset();
  if (tensorboard) {
    const std::string events = tensorboard->path();
    tensorboard.reset();
    std::filesystem::remove(events, ignored);
  }
  for (const char* file : {"metrics.jsonl", "config.toml", "plan.txt"})
    std::filesystem::remove(dir / file, ignored);
  directory_lock.reset();
  std::filesystem::remove(dir / ".lock", ignored);
  if (made_run_dir)
    std::filesystem::remove(dir, ignored);  // only when nothing else is in it
}

std::string TrainingRun::set_failed_run_aside() {
  if (resuming || !job.is_main() || directory_lock == nullptr)
    return "";
  std::error_code ignored;
  const std::filesystem::path dir(run_dir);
  std::filesystem::remove(dir / "checkpoints", ignored);  // only when empty: checkpoints keep it
  if (std::filesystem::exists(dir / "checkpoints", ignored))
    return "";
  metrics.reset();  // flushed and closed before the files move
  std::vector<std::string> records;
  if (tensorboard) {
    records.push_back(tensorboard->path());
    tensorboard.reset();
  }
  for (const char* file :
       {"metrics.jsonl", "config.toml", "plan.txt", "best.safetensors", "report.html"}) {
    if (std::filesystem::exists(dir / file, ignored))
      records.push_back((dir / file).string());
  }
  const std::string aside = set_checkpoints_aside(
      run_dir, records,
      "failed-after-" + std::to_string(state.at.step) + "u-" + default_run_timestamp());
  directory_lock.reset();
  std::filesystem::remove(dir / ".lock", ignored);
  return aside;
}

void TrainingRun::write_description() const {
  // Absolute paths: evaluate, predict, sample and --resume then work from any directory.
  atomic_write_file(run_dir + "/config.toml", render_toml_config(config.with_absolute_paths()),
                    Links::Replace);
  atomic_write_file(run_dir + "/plan.txt", format_plan_text(resolved_now()), Links::Replace);
}

SessionRequest training_session_request(bool custom_data) {
  SessionRequest request;
  request.job = JobScope::FromEnvironment;
  request.memory = MemoryAccounting::Budgeted;
  request.data = custom_data ? SessionData::None : SessionData::Load;
  request.check_before_data = [](const TrainConfig& config, const JobPlace& job) {
    // Outputs that cannot be written fail now, not after the training they would hold.
    if (!config.save_weights.empty() && job.is_main())  // only rank 0 writes it
      check_output_file(config.save_weights, "--save-weights");
    // So do an --out that holds a run and a module that is not there, before the data loads (a
    // corpus can take minutes). Both are checked again where they are used.
    if (config.resume.empty() && !config.out.empty() && job.is_main())
      refuse_used_run_directory(config.out, LockHeld::No);
    if (is_torchscript_model(config.model))
      check_model_file_exists(torchscript_path(config.model));
  };
  return request;
}

TrainingRun set_up_training(Session session, Console& console, const CustomProblem* problem) {
  const TrainConfig& requested = session.config;
  const JobPlace& job = session.job;
  TrainConfig resolved_config = requested;
  check_config(problem == nullptr || !problem->make_model || is_custom(resolved_config.model),
               "a C++ program's model is named cpp:NAME in the configuration, got model '" +
                   resolved_config.model + "'",
               "set config.model (and config.dataset, for data of the program's) to "
               "\"cpp:NAME\" (docs/library.md)");
  const bool custom_data = problem && is_custom(resolved_config.dataset);
  DatasetSplits data = custom_data ? problem->data : std::move(session.data);
  if (custom_data) {
    check_config(data.train.size() > 0 && (data.train.classes > 0 || data.train.is_regression()),
                 "the program's training data is empty or names no classes",
                 "fill CustomProblem::data.train and set its classes (docs/library.md)");
    data = set_aside_controller_slice(std::move(data), resolved_config);
  }
  // The samples set aside, named in config.toml: a rerun, a resume and a replay train on the
  // same samples.
  if (data.controller.size() > 0)
    resolved_config.growth_holdout = data.controller.size();
  check_watched_metrics(resolved_config, data);
  check_eval_every(resolved_config, data);
  if (data.pixels.known()) {
    // The normalisation the images went through, measured or given: config.toml records it,
    // so a rerun, a resume and an evaluation feed the model alike.
    resolved_config.pixel_mean = data.pixels.mean;
    resolved_config.pixel_std = data.pixels.std;
  }
  if (resolved_config.is_sequence_dataset()) {
    // What the data resolved to, so that config.toml reruns, resumes and evaluates this run:
    // the packing, and a token file's vocabulary (a validation file's largest id may be less).
    resolved_config.sequences = resolved_config.sequence_mode();
    if (resolved_config.is_token_file_dataset() && resolved_config.vocab_size == 0)
      resolved_config.vocab_size = data.train.vocabulary;
  }
  const ModelFactory make_model = problem ? problem->make_model : ModelFactory{};
  const ModelFactory make_probe_model =
      problem && problem->make_probe_model ? problem->make_probe_model : make_model;
  auto reducer = make_reducer(job, resolved_config);
  // Before any other collective (--micro-batch auto broadcasts its choice): ranks started with
  // other flags stop here, together, each naming what differs.
  check_ranks_agree(*reducer, [&] { return describe_configuration(requested); });
  if (resolved_config.micro_batch_auto)
    choose_micro_batch(resolved_config, data.train, job, *reducer, console, make_probe_model);
  // Resolved on every rank from the same inputs, so a bad plan fails everywhere alike. The
  // plan's micro-batch may shrink later (out-of-memory back-off); its global batch never does.
  ResolvedRun resolved =
      resolve_run(resolved_config, data.train.size(), job.world_size, items_per_sample(data.train));
  measure_token_cut(resolved, resolved_config, data.train);
  // config.toml names the rate, its batch and the rule auto resolved to: a rerun or a resume
  // trains at the same rates whatever later versions make of the defaults.
  resolved_config.resolve_default_rate();
  if (resolved_config.lr_scaling == LrScaling::Auto)
    resolved_config.lr_scaling = resolved.schedule.config().scaling;
  const bool adam_sqrt_adjust_by_default = resolved_config.adam_sqrt_adjust_by_default();
  resolved_config.adam_sqrt_adjust = resolved_config.adam_sqrt_adjust_on();
  TrainingRun r(std::move(resolved_config), job, std::move(data), std::move(resolved));
  r.adam_sqrt_adjust_by_default = adam_sqrt_adjust_by_default;
  r.state.schedule = make_run_schedule(r.resolved);
  r.state.schedule->set_micro_batch_tokens(r.config.micro_batch_tokens);
  TrainConfig& config = r.config;
  r.reducer = std::move(reducer);
  r.device = session.device;
  r.threads = session.threads;
  r.run_dir = config.out.empty() ? default_run_directory() : config.out;
  r.resuming = !config.resume.empty();
  announce_run(r, session.flushing_denormals, console);

  torch::manual_seed(config.seed);
  r.model = make_model ? make_model() : build_model(config, r.data.train);
  if (UserModuleImpl* module = make_model ? as_user_module(*r.model) : nullptr)
    check_user_module(*module, config, r.data.train);
  if (!config.init_weights.empty())
    load_weights(config.init_weights, *r.model);
  r.task();  // a loss option the task cannot take (--label-smoothing on a regression) ends here
  // Weights, buffers and, from here on, gradients and optimizer state on the run's device.
  r.model->to(r.device);
  // What the training samples hold, read once: the ranks compare it, checkpoints record it.
  const RankDescription data_digests = training_data_digests(r.data.train);
  // Before the first collective whose tensors depend on them: ranks started differently stop
  // here, together, each naming what differs.
  check_ranks_agree(*r.reducer, [&] {
    return describe_data_and_model(requested, r.data, data_digests, *r.model);
  });
  // Only now, with the data, the plan and the weights accepted, does a new run directory
  // appear: bad input leaves nothing behind. A resumed run continues in its own directory, and
  // rewrites its description only once the checkpoint has been accepted.
  if (r.job.is_main() && !r.resuming) {
    r.made_run_dir = !path_exists(r.run_dir);
    std::string set_aside;
    r.directory_lock = prepare_run_directory(r.run_dir, &set_aside);
    if (!set_aside.empty()) {
      console.say(
          "moved the records of a run that stopped before its first checkpoint (nothing "
          "could resume it) to " +
          set_aside + "; this run starts afresh in " + r.run_dir);
    }
  }
  try {
    if (r.directory_lock && !r.resuming)
      r.write_description();  // a full disk fails here: the directory is removed again
    finish_set_up(r, data_digests, console);
  } catch (...) {
    r.discard_unstarted();
    throw;
  }
  return r;
}

}  // namespace bigbatch
