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
#include "optim/optimizer.h"
#include "report/plan_report.h"
#include "report/run_records.h"
#include "runtime/runtime_env.h"
#include "train/micro_batch_fit.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// "20261201-154354", local time: sortable, and safe in a path.
std::string default_run_timestamp() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return stamp;
}

// A run directory holding a run is refused. Unless this process holds its lock, a run training
// there is named first (DirectoryLock says by which process), then a run that ended there.
enum class LockHeld { No, Yes };
void refuse_used_run_directory(const std::string& dir, LockHeld held) {
  for (const char* file : {"metrics.jsonl", "weights.safetensors", "config.toml"}) {
    if (path_exists(dir + "/" + file)) {
      if (held == LockHeld::No)
        DirectoryLock::refuse_if_held(dir);
      throw Error(ErrorKind::Io, "run directory '" + dir + "' already holds a run (" + file + ")",
                  "choose another --out, or delete that directory");
    }
  }
}

// A run directory is never reused: a finished run's files are worth more than a typo in --out.
// Creates the directory of a new run and locks it; the check that it holds no run comes after
// the lock, so two runs started into one directory at once cannot both pass it.
std::unique_ptr<DirectoryLock> prepare_run_directory(const std::string& dir) {
  ensure_directory(dir);
  auto lock = std::make_unique<DirectoryLock>(dir);
  refuse_used_run_directory(dir, LockHeld::Yes);
  return lock;
}

// Cuts metrics.jsonl back to what it held when the checkpoint was written. The file may not be
// as the checkpoint left it (an older checkpoint without its length, a file edited or shortened
// since): then the lines of steps after the checkpoint's are dropped instead. Returns whether
// the cut was exact.
bool keep_metrics_of_checkpoint(const std::string& path, const TrainingProgress& progress) {
  if (!path_exists(path))
    return false;
  const std::string text = read_text_file(path, kMaxMetricsFileBytes);
  const auto length = static_cast<size_t>(std::max<int64_t>(0, progress.metrics_bytes));
  if (progress.metrics_bytes >= 0 && length <= text.size() &&
      (length == 0 || text[length - 1] == '\n')) {
    if (length < text.size())
      atomic_write_file(path, text.substr(0, length));
    return true;
  }
  std::string kept;
  size_t number = 0;
  for (const auto& line : split(text, '\n')) {
    ++number;
    if (line.empty())
      continue;
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object())
      continue;  // a line cut short by a crash
    check_metrics_record(record, path, number);
    if (record.contains("step") && record["step"].get<int64_t>() > progress.step)
      continue;
    kept += line + "\n";
  }
  atomic_write_file(path, kept);
  return false;
}

// --early-stop and --keep-best watching another metric than the checkpoint counted (the flags
// override config.toml on a resume): the count starts again, on every rank alike.
void restart_watches_of_other_metrics(TrainingRun& r, Console& console) {
  const bool has_validation = r.data.validation.size() > 0;
  const std::pair<std::optional<WatchedMetric>, MetricWatch*> watches[] = {
      {r.config.early_stop_metric(), &r.state.at.early_stop},
      {r.config.keep_best_metric(), &r.state.at.keep_best}};
  for (const auto& [watched, watch] : watches) {
    if (!watched || watch->counted_step < 0 || watch->metric == watched->metric_in(has_validation))
      continue;
    console.say(std::string(watch == &r.state.at.early_stop ? "--early-stop" : "--keep-best") +
                " now watches " + watched->metric_in(has_validation) +
                " where the checkpoint counted " + watch->metric + ": its count starts again here");
    *watch = MetricWatch{};
  }
}

// The step and metric a best-weights file records (step -1: unreadable).
std::pair<int64_t, std::string> best_file_record(const std::string& path) {
  std::map<std::string, std::string> metadata;
  try {
    load_safetensors(path, &metadata);
  } catch (const Error&) {
    return {-1, ""};
  }
  return {parse_int(metadata["step"]).value_or(-1), metadata["best_metric"]};
}

// --keep-best on a resume: RUN/best.safetensors must be the best the checkpoint knew of. After a
// kill or from an older checkpoint it may be a later one (of updates this resume trains again,
// or of a history it abandons): the checkpoint's own copy replaces it. Without one (a
// checkpoint from before --keep-best) the file goes and the best is looked for again.
void restore_best_weights(TrainingRun& r, Console& console) {
  if (!r.config.keep_best_metric())
    return;
  const std::string path = r.run_dir + "/best.safetensors";
  MetricWatch& watch = r.state.at.keep_best;
  const auto matches = [&](const std::string& file) {
    if (!watch.seen || !path_exists(file))
      return false;
    const auto [step, metric] = best_file_record(file);
    return step == watch.best_step && metric == watch.metric;
  };
  if (matches(path) || (!watch.seen && !path_exists(path)))
    return;
  std::string saved;
  try {
    saved = find_latest_checkpoint(r.config.resume) + "/best.safetensors";
  } catch (const Error&) {
  }
  std::error_code ignored;
  if (!saved.empty() && matches(saved)) {
    atomic_write_file(path, read_text_file(saved));
    console.say("restored " + path + " (update " + std::to_string(watch.best_step) +
                ", the best the checkpoint knew of) from the checkpoint");
    return;
  }
  const bool had_file = path_exists(path);
  const std::string file_metric = had_file ? best_file_record(path).second : std::string();
  std::filesystem::remove(path, ignored);
  const std::string watched = r.config.keep_best_metric()->metric_in(r.data.validation.size() > 0);
  if (watch.seen) {
    console.say("--keep-best: the best " + watch.metric + " the checkpoint knew of (update " +
                std::to_string(watch.best_step) +
                ") has no weights kept with it; the best is looked for again from here");
  } else if (had_file && file_metric != watched) {
    console.say("removed " + path + ": it holds the best " +
                (file_metric.empty() ? std::string("of nothing it names") : file_metric) +
                ", and --keep-best watches " + watched);
  } else if (had_file) {
    console.say("removed " + path + ": it is from past the checkpoint this run resumes (update " +
                std::to_string(r.state.at.step) + ")");
  }
  watch = MetricWatch{};
}

std::unique_ptr<GradientReducer> make_reducer(const JobPlace& job, const TrainConfig& config) {
  if (job.world_size == 1)
    return std::make_unique<LocalReducer>();
  CollectiveOptions options;
  options.timeout_seconds = config.dist_timeout;
  options.bucket_bytes = static_cast<int64_t>(config.bucket_mb * 1024 * 1024);
  return make_collective_reducer(*job.env, options);
}

// --micro-batch auto: measured on every rank (each has the same budget); rank 0's choice is
// everyone's, since timings differ between processes. Under a ramp the micro-batch serves
// every step, so it is fitted to the smallest.
void choose_micro_batch(TrainConfig& config, const TensorDataset& train, const JobPlace& job,
                        GradientReducer& reducer, Console& console,
                        const ModelFactory& make_model) {
  const int64_t per_rank = largest_useful_micro_batch(config, job.world_size);
  const FitResult fit = measure_micro_batch_fit(config, train, per_rank, {}, make_model);
  if (fit.max_micro_batch == 0) {
    throw Error(ErrorKind::Memory,
                "not even a micro-batch of 1 fits the memory budget of " +
                    human_bytes(double(fit.budget_bytes)) + " (with the " +
                    format_double(100 * config.fit_margin) + "% margin) for " + config.model,
                "raise --memory-budget, or lower --fit-margin");
  }
  const int64_t fastest =
      fit.fastest_micro_batch > 0 ? fit.fastest_micro_batch : fit.max_micro_batch;
  int64_t picked = fastest;
  std::string evened;
  if (config.global_batch_schedule.empty() && !config.global_batch_auto) {
    // The same number of micro-steps in equal parts: no ragged last micro-batch, and a peak no
    // larger (a smaller size of a fitting one fits).
    const int64_t steps = (per_rank + fastest - 1) / fastest;
    const int64_t even = (per_rank + steps - 1) / steps;
    if (even < fastest) {
      evened = ", evened from " + std::to_string(fastest) + " to the same " +
               std::to_string(steps) + " micro-steps per update of " + std::to_string(per_rank) +
               " in equal parts";
      picked = even;
    }
  }
  std::vector<torch::Tensor> choice = {torch::tensor({picked})};
  reducer.broadcast_from_first_rank(choice);
  config.micro_batch = choice[0].item<int64_t>();
  config.micro_batch_auto = false;
  console.say(
      "micro-batch auto: " + std::to_string(*config.micro_batch) + " (the fastest size that fits " +
      human_bytes(double(fit.usable_bytes)) + " = budget " + human_bytes(double(fit.budget_bytes)) +
      " less the margin" + evened + "; largest fitting " + std::to_string(fit.max_micro_batch) +
      (fit.probe_row_tokens > 0 ? "; probed at the longest rows, " +
                                      std::to_string(fit.probe_row_tokens) + " target tokens"
                                : std::string()) +
      "; 'bigbatch fit' shows the table)");
}

// Class labels that training cannot learn from: held-out classes it never sees, and a class
// count (the largest label + 1) that is mostly empty — a label file of another dataset, or a
// subset cut along the labels. Said, not refused: the data may mean it.
void warn_about_class_coverage(const DatasetSplits& data, Console& console) {
  const TensorDataset& train = data.train;
  if (train.is_tokens() || train.is_regression() || train.classes <= 0 || train.size() == 0)
    return;
  const auto present = [&](const TensorDataset& split) {
    return torch::bincount(split.targets.to(torch::kInt64), {}, train.classes).gt(0);
  };
  const torch::Tensor trained = present(train);
  const int64_t seen = trained.sum().item<int64_t>();
  if (seen == 1) {
    const int64_t only = trained.nonzero()[0][0].item<int64_t>();
    console.say("warning: the training labels use 1 of " + std::to_string(train.classes) +
                (train.classes == 1 ? " class" : " classes") + " (every label is " +
                std::to_string(only) +
                "): the model can only learn to answer it; check the label file (or, for "
                "regression, save the targets as floating point)");
  } else if (seen * 2 < train.classes) {
    console.say("warning: the training labels use " + std::to_string(seen) + " of " +
                std::to_string(train.classes) +
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
    console.say("warning: the " + std::string(name) + " split has " +
                std::to_string(unseen.size(0)) + (unseen.size(0) == 1 ? " class" : " classes") +
                " that training never sees (" + join(shown, ", ") +
                (unseen.size(0) > 5 ? ", ..." : "") +
                "): its accuracy cannot reach 100%; check the labels or the split");
  }
}

void announce_run(const TrainingRun& r, bool flushing_denormals, Console& console) {
  const ResolvedRun& run = r.resolved;
  const TrainConfig& config = r.config;
  const int64_t world_size = r.job.world_size;
  console.say(
      "bigbatch: " + config.model + " on " + config.dataset + " (" +
      std::to_string(r.data.train.size()) + " train, " + std::to_string(r.data.validation.size()) +
      " validation, " + std::to_string(r.data.test.size()) + " test samples" +
      (r.data.controller.size() > 0
           ? ", " + std::to_string(r.data.controller.size()) + " set aside for the growth tests"
           : "") +
      "), " +
      (world_size > 1 ? std::to_string(world_size) + " ranks (" + r.job.env->source + "), " : "") +
      "device " + describe_device(r.device) + (world_size > 1 ? " on rank 0" : "") + ", " +
      runtime_environment_summary() +
      (flushing_denormals ? ", denormals flushed to zero" : ", denormals kept"));
  if (!r.data.description.empty())
    console.say("data: " + r.data.description);
  warn_about_class_coverage(r.data, console);
  for (const std::string& warning : r.data.warnings)
    console.say("warning: " + warning);
  if (run.micro_batch_tokens > 0) {
    console.say("batch plan: " + describe_token_cut(run) + (world_size > 1 ? " on rank 0" : "") +
                "; " + std::to_string(run.epoch.updates_per_epoch) + " updates per epoch");
  } else {
    console.say(
        "batch plan: global batch " + run.plan.describe() + " (" +
        (run.plan.derived.empty() ? std::string("all given") : run.plan.derived + " derived") +
        "); " + std::to_string(run.epoch.updates_per_epoch) + " updates and " +
        std::to_string(run.epoch.micro_steps_per_epoch) + " micro-steps per epoch" +
        (world_size > 1 ? " per rank" : ""));
  }
  if (run.auto_batch) {
    const GrowthRule& rule = *run.auto_batch;
    console.say(
        "global batch auto: starts at " + std::to_string(run.plan.global_batch_size) +
        ", doubles while the predicted goodput gain is at least " +
        format_significant(100 * rule.threshold, 3) +
        (rule.predict_at == GrowthPrediction::BandLow
             ? "% (at the noise scale's low end; an update's cost "
             : "% (at the noise scale's estimate, --growth-predict-at estimate; an update's "
               "cost ") +
        (rule.update_cost ? "given as " + format_significant(*rule.update_cost, 4) + " samples"
                          : "timed over updates " + std::to_string(kCostWarmupUpdates + 1) + "-" +
                                std::to_string(kCostWarmupUpdates + kCostCalibrationUpdates) +
                                (world_size > 1 ? " on rank 0" : "")) +
        "), at most " + std::to_string(rule.max_global_batch) +
        (run.auto_batch_limit_note.empty() ? std::string()
                                           : " (" + run.auto_batch_limit_note + ")") +
        (rule.branch_test
             ? ", each doubling tested on " + std::to_string(r.data.controller.size()) +
                   " samples set aside, the tests throwing away at most " +
                   format_significant(100 * rule.test_budget, 3) + "% of the samples trained"
             : ", untested (--growth-test none)") +
        "; lr " + format_double(config.base_lr()) + " @ " +
        std::to_string(run.ramp->reference_batch) + ", " +
        to_string(run.schedule.config().scaling) + " with the batch; warmup and " +
        to_string(run.schedule.config().kind) + " schedule counted in samples (" +
        std::to_string(run.schedule.config().warmup_updates) + " and " +
        std::to_string(run.schedule.config().total_updates) + " updates of " +
        std::to_string(run.ramp->reference_batch) + ")");
  } else if (run.ramp) {
    console.say("global batch schedule " + run.ramp->batches.to_string() + ": " +
                std::to_string(run.ramp->phases.size()) + " steps, " +
                std::to_string(run.total_updates) + " updates; lr " +
                format_double(config.base_lr()) + " @ " +
                std::to_string(run.ramp->reference_batch) + ", " +
                to_string(run.schedule.config().scaling) + " with the batch; warmup and " +
                to_string(run.schedule.config().kind) + " schedule counted in samples (" +
                std::to_string(run.schedule.config().warmup_updates) + " and " +
                std::to_string(run.schedule.config().total_updates) + " updates of " +
                std::to_string(run.ramp->reference_batch) + ")");
  } else {
    const int64_t schedule_updates = run.schedule.config().total_updates;
    console.say(run.schedule.describe_scaling() + ", warmup " +
                count_of(run.schedule.config().warmup_updates, "update") + ", " +
                to_string(run.schedule.config().kind) + " schedule over " +
                count_of(schedule_updates, "update") +
                (schedule_updates != run.total_updates
                     ? " (--schedule-length; the run trains " +
                           count_of(run.total_updates, "update") +
                           (schedule_updates < run.total_updates
                                ? ", the rate holding its final value past the schedule's end)"
                                : ")")
                     : std::string()));
  }
  if (run.eval_every_samples > 0) {
    console.say("evaluation: every " + std::to_string(run.eval_every_samples) +
                " samples (--eval-every " + config.eval_every.to_string() +
                ", counted in samples as the batch changes) and at each epoch's end");
  }
  if (run.eval_every_updates > 0) {
    console.say("evaluation: every " + std::to_string(run.eval_every_updates) +
                " updates (--eval-every " + config.eval_every.to_string() +
                ") and at each epoch's end");
  }
  if (config.micro_batch_tokens > 0) {
    console.say("micro-batches: at most " + std::to_string(config.micro_batch_tokens) +
                " padded tokens each (rows x longest), cut inside every window after sorting "
                "its samples by length; the update is that of the whole window");
  }
  for (const auto& warning : run.epoch.warnings)
    console.say("warning: " + warning);
  for (const auto& warning : run.schedule.warnings())
    console.say("warning: " + warning);
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
             as_scripted(*r.model)) {
    console.say("note: " + config.model + " normalises over each micro-batch of " +
                std::to_string(plan.micro_batch_size) + " samples in its BatchNorm layers (" +
                join(batch_statistics_layers(*r.model), ", ") +
                "), so its updates differ from one batch of " +
                std::to_string(plan.global_batch_size) +
                "; --bn-mode frozen makes them exact. Running statistics: the module's own "
                "momentum (a TorchScript constant) per micro-step, " +
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
              (as_scripted(*r.model) &&
               !as_scripted(*r.model)->batch_norm_layers(/*training_only=*/false).empty()))) {
    console.say(
        "note: BatchNorm frozen: its running statistics normalise in training too, so "
        "accumulation equals one batch; from scratch they are the identity (mean 0, "
        "variance 1) — frozen suits fine-tuning from --init-weights");
  }
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const TrainingRun& r, Console& console) {
  OptimizerSettings settings = OptimizerSettings::from(r.config);
  if (const auto& adam = r.resolved.adam) {
    settings.adam_beta1 = adam->beta1;
    settings.adam_beta2 = adam->beta2;
    settings.adam_eps = adam->eps;
    console.say(std::string("adamw under the square-root rule (--adam-sqrt-adjust") +
                (r.adam_sqrt_adjust_by_default
                     ? ", the default under --global-batch auto; --no-adam-sqrt-adjust keeps the "
                       "betas"
                     : "") +
                "): " + describe(*adam) +
                (r.resolved.ramp ? " at the starting batch; each batch trains at its own" : ""));
  }
  console.say("optimizer: " + settings.describe());
  return make_optimizer(settings, r.model->parameters());
}

// Every rank reads the checkpoint (a shared file system across machines is assumed).
// A resume from an older checkpoint starts a new history. The run's newer checkpoints belong
// to the one it abandons: left in place, pruning would delete the new history's checkpoints
// and keep theirs, and the next resume would continue the abandoned one (issue 21).
// `move` false: only the refusal, before anything is read; true: the move, once the chosen
// checkpoint has been accepted (a refused one must leave the newer history where it was).
void abandon_newer_history(TrainingRun& r, Console& console, bool move) {
  const std::vector<std::string> newer = newer_checkpoints(r.config.resume);
  if (newer.empty())
    return;
  const std::string newest = std::filesystem::path(newer.back()).filename().string();
  const std::string chosen = std::filesystem::path(r.config.resume).filename().string();
  if (!r.config.discard_newer) {
    throw Error(ErrorKind::Format,
                "checkpoint '" + r.config.resume + "' is older than " +
                    std::to_string(newer.size()) + " other checkpoint(s) of its run (the newest " +
                    newest + "): resuming from it would mix two histories",
                "add --discard-newer to move them to " + r.run_dir +
                    "/abandoned/ and continue from " + chosen +
                    ", or resume the run directory to continue from " + newest);
  }
  r.abandons_newer = true;
  if (!move || !r.job.is_main())
    return;
  const std::string aside =
      set_checkpoints_aside(r.run_dir, newer, "after-" + chosen + "-" + default_run_timestamp());
  console.say("moved " + std::to_string(newer.size()) + " newer checkpoint(s), up to " + newest +
              ", to " + aside + ": the run continues from " + chosen + " as a new history");
}

// What must be the same on every rank of a job: the configuration as resolved from flags and
// files (less what is a rank's own business: its progress display and thread count), then the
// data (sizes, sample shape, a digest of the training samples) and the model's parameters.
// Paths that only rank 0 uses (its run directory, its output file, the initial weights it
// broadcasts) are left out: machines may name their local copies differently.
RankDescription describe_configuration(const TrainConfig& requested) {
  RankDescription out;
  for (const auto& line : split(render_toml_config(requested), '\n')) {
    const auto equals = line.find(" = ");
    if (equals == std::string::npos)
      continue;
    const std::string key = line.substr(0, equals);
    if (key != "progress" && key != "threads" && key != "out" && key != "save-weights" &&
        key != "init-weights")
      out.emplace_back(key, line.substr(equals + 3));
  }
  return out;
}

// The training samples' contents, as digests named by what they cover: what a rank compares
// with rank 0, and what a resume compares with its checkpoint.
RankDescription training_data_digests(const TensorDataset& train) {
  RankDescription out;
  if (train.is_tokens()) {
    // Every training row's tokens, read as a batch reads them, and where each row lies.
    const TokenRows& rows = *train.rows;
    out.emplace_back("training samples", std::to_string(train.size()) + " rows of " +
                                             std::to_string(rows.width) + " tokens");
    DataDigest tokens;
    std::vector<int64_t> row(size_t(rows.width) + 1);
    for (int64_t r = 0; r < rows.rows(); ++r) {
      // All of the row's tokens: its inputs and the last target.
      const int64_t count = rows.lengths[size_t(r)] + 1;
      rows.source->read(rows.starts[size_t(r)], count, row.data());
      tokens.add(row.data(), size_t(count) * sizeof(int64_t));
    }
    out.emplace_back("training tokens", tokens.value());
    out.emplace_back("training rows",
                     data_digest(rows.starts.data(), rows.starts.size() * sizeof(int64_t)) +
                         data_digest(rows.lengths.data(), rows.lengths.size() * sizeof(int64_t)));
    return out;
  }
  const auto digest = [](const torch::Tensor& t) {
    const torch::Tensor c = t.contiguous();
    return data_digest(c.data_ptr(), c.nbytes());
  };
  out.emplace_back("training samples", std::to_string(train.size()) + " of shape " +
                                           c10::str(train.inputs.sizes().slice(1)));
  out.emplace_back("training inputs", digest(train.inputs));
  out.emplace_back("training targets", digest(train.targets));
  return out;
}

RankDescription describe_data_and_model(const TrainConfig& requested, const DatasetSplits& data,
                                        const RankDescription& data_digests,
                                        torch::nn::Module& model) {
  RankDescription out;
  if (is_torchscript_model(requested.model))
    out.emplace_back("model file", file_digest(torchscript_path(requested.model)));
  out.insert(out.end(), data_digests.begin(), data_digests.end());
  out.emplace_back("validation samples", std::to_string(data.validation.size()));
  out.emplace_back("test samples", std::to_string(data.test.size()));
  for (const auto& named : model.named_parameters())
    out.emplace_back("parameter " + named.key(), c10::str(named.value().sizes()));
  return out;
}

// `describe` runs only in a job of several ranks: a single process has no one to agree with,
// and the description digests the whole training set.
void check_ranks_agree(GradientReducer& reducer, const std::function<RankDescription()>& describe) {
  if (reducer.world_size() == 1)
    return;
  const RankDescription description = describe();
  // Rank 0's text: its length first, so every rank can receive it.
  std::string text = encode_description(description);
  std::vector<torch::Tensor> length = {torch::tensor({static_cast<int64_t>(text.size())})};
  reducer.broadcast_from_first_rank(length);
  const int64_t size = length[0].item<int64_t>();
  std::vector<torch::Tensor> bytes = {torch::zeros({size}, torch::kUInt8)};
  if (reducer.rank() == 0)
    std::memcpy(bytes[0].data_ptr(), text.data(), text.size());
  reducer.broadcast_from_first_rank(bytes);
  const std::string reference(static_cast<const char*>(bytes[0].data_ptr()),
                              static_cast<size_t>(size));
  const auto differences = description_differences(description, decode_description(reference));
  // Every rank learns which ranks differ, so that all of them stop, not only those.
  torch::Tensor differing = torch::zeros({reducer.world_size()}, torch::kInt64);
  differing[reducer.rank()] = differences.empty() ? 0 : 1;
  reducer.sum_over_ranks(differing);
  std::vector<std::string> ranks;
  for (int64_t rank = 0; rank < reducer.world_size(); ++rank) {
    if (differing[rank].item<int64_t>() != 0)
      ranks.push_back(std::to_string(rank));
  }
  if (ranks.empty())
    return;
  const std::string hint = "start every rank with the same flags, config file, data and model file";
  if (!differences.empty()) {
    // The first few differences: one setting explains the parameter shapes that follow it.
    constexpr size_t kShown = 3;
    std::vector<std::string> shown(differences.begin(),
                                   differences.begin() + std::min(differences.size(), kShown));
    if (differences.size() > kShown)
      shown.push_back("and " + std::to_string(differences.size() - kShown) + " more");
    throw Error(
        ErrorKind::Distributed,
        "rank " + std::to_string(reducer.rank()) + " differs from rank 0: " + join(shown, "; "),
        hint);
  }
  throw Error(ErrorKind::Distributed,
              "rank " + std::to_string(reducer.rank()) + ": rank(s) " + join(ranks, ", ") +
                  " were started differently from rank 0 (their messages say how)",
              hint);
}

// A resume that changes the run's length (--epochs, --max-updates) re-plans the learning-rate
// schedule over the new length, so the rate jumps where the old plan had decayed: said at the
// start, against the plan in the run's config.toml (before it is rewritten).
void say_replanned_schedule(const TrainingRun& r, Console& console) {
  const std::string path = r.run_dir + "/config.toml";
  if (!r.job.is_main() || !path_exists(path))
    return;
  TrainConfig planned;
  std::unique_ptr<RunSchedule> before;
  try {
    load_toml_config(planned, path);
    planned.complete_older_run();
    const auto length_text = [](const TrainConfig& c) {
      return c.schedule_length ? c.schedule_length->to_string() : std::string();
    };
    if (planned.epochs == r.config.epochs && planned.max_updates == r.config.max_updates &&
        length_text(planned) == length_text(r.config))
      return;
    before = make_run_schedule(resolve_run(planned, r.data.train.size(), r.job.world_size,
                                           items_per_sample(r.data.train)));
  } catch (const Error&) {
    return;  // a plan that no longer resolves has nothing to compare
  }
  const LrScheduleConfig& was = before->lr_schedule().config();
  const LrScheduleConfig& now = r.state.schedule->lr_schedule().config();
  if (was.total_updates == now.total_updates)
    return;
  before->restore(r.state.at);
  const double rate_was = before->rate(r.state.at, {}).lr;
  const double rate_now = r.state.schedule->rate(r.state.at, {}).lr;
  // Only a decay has an end to keep (a step schedule's milestones are intervals of their own).
  const bool decays = was.kind == ScheduleKind::Cosine || was.kind == ScheduleKind::Linear;
  const double end_rate = before->lr_schedule().lr_at(was.total_updates);
  std::vector<std::string> changes;
  if (planned.epochs != r.config.epochs)
    changes.push_back(std::to_string(planned.epochs) + " -> " + std::to_string(r.config.epochs) +
                      " epochs");
  if (planned.max_updates != r.config.max_updates)
    changes.push_back("--max-updates changed");
  console.say(
      (changes.empty() ? std::string("--schedule-length changed")
                       : "the run's length changed (" + join(changes, ", ") + ")") +
      ": its " + to_string(now.kind) + " schedule is re-planned over " +
      count_of(now.total_updates, "update") + " where the run planned " +
      count_of(was.total_updates, "update") + ", so update " + std::to_string(r.state.at.step + 1) +
      " trains at " + format_significant(rate_now, 4) + " where the plan had " +
      format_significant(rate_was, 4) +
      (r.state.at.step > 0 && decays ? "; to keep the planned schedule, add --schedule-length " +
                                           std::to_string(was.total_updates) +
                                           "u (past its end the rate holds its final value, " +
                                           format_significant(end_rate, 4) +
                                           (end_rate > 0 ? ")" : ": those updates would not train)")
                                     : std::string()));
}

// `partial`: the window a checkpoint taken inside one holds, for the engine to go on with.
void resume_from_checkpoint(TrainingRun& r, PartialWindow& partial, Console& console) {
  const TrainConfig& config = r.config;
  RunSchedule& schedule = *r.state.schedule;
  TrainingProgress& at = r.state.at;
  at = read_checkpoint(config.resume, r.identity, *r.model, *r.optimizer, &partial);
  if (schedule.restore(at))
    prepare_for_training(r.model, config, schedule.plan().accumulation_steps);
  console.say("resumed from " + config.resume + " at update " + std::to_string(at.step) +
              " (epoch " + std::to_string(at.epoch + 1) + ", " + std::to_string(at.samples_seen) +
              " samples seen); batch plan " + schedule.plan().describe());
  const bool resumed_inside_window = at.micro_step > 0;
  if (at.micro_step > 0 && (partial.micro_batch_size != schedule.plan().micro_batch_size ||
                            partial.world_size != r.job.world_size ||
                            partial.micro_batch_tokens != config.micro_batch_tokens)) {
    // The partial gradient belongs to another cut of the window: redo the window instead, on
    // the same samples, so the mathematics is unchanged.
    console.say("the checkpoint is " + std::to_string(at.micro_step) + " micro-steps into update " +
                std::to_string(at.step + 1) + " under micro " +
                std::to_string(partial.micro_batch_size) + " x world " +
                std::to_string(partial.world_size) +
                "; that window is replayed from its start with the new plan");
    at.micro_step = 0;
  }
  if (at.position_in_epoch < 0)  // a checkpoint from before positions were saved
    at.position_in_epoch = at.update_in_epoch * schedule.plan().global_batch_size;
  if (at.position_in_epoch > r.data.train.size()) {
    throw Error(ErrorKind::Format,
                "checkpoint '" + config.resume + "' is at sample " +
                    std::to_string(at.position_in_epoch) + " of an epoch of " +
                    std::to_string(r.data.train.size()),
                "resume with the dataset and --train-subset the run was started with");
  }
  if (const std::string wrong = schedule.inconsistency(at); !wrong.empty()) {
    throw Error(ErrorKind::Format, "checkpoint '" + config.resume + "' has " + wrong,
                "state.json was edited or damaged: resume from an earlier checkpoint");
  }
  const bool nothing_left = at.micro_step == 0 && schedule.complete(at);
  // The run's final weights belong to its newest history: with newer checkpoints abandoned,
  // they are not this resume's.
  if (nothing_left && !r.abandons_newer && path_exists(r.run_dir + "/weights.safetensors")) {
    r.finished = true;  // a finished run is reported, not rewritten (issue 20)
    return;
  }
  abandon_newer_history(r, console, /*move=*/true);
  say_replanned_schedule(r, console);
  if (r.job.is_main()) {
    r.write_description();
    // Lines the interrupted run wrote after its checkpoint are replayed now: drop them.
    if (keep_metrics_of_checkpoint(r.run_dir + "/metrics.jsonl", at) && resumed_inside_window)
      r.state.update_already_logged = at.step + 1;
  }
}

// The engine (and --bn-mode window's statistics pass) over the model and optimizer, with a
// window restored from a mid-window checkpoint.
void build_engine(TrainingRun& r, const PartialWindow& partial, Console& console) {
  r.precision = r.config.precision;
  if (r.precision == Precision::Bf16) {
    console.say(r.device.is_cuda() || cpu_has_native_bf16()
                    ? "precision: bf16 forward passes (autocast), fp32 weights, loss and gradient "
                      "accumulation"
                    : "warning: --precision bf16 on a CPU without native bf16 (no AVX-512 BF16 "
                      "or AMX): emulated, likely slower than fp32");
  }
  EngineOptions engine_options;
  engine_options.clip_norm = r.config.clip_norm;
  engine_options.measure_noise = r.config.noise_scale;
  engine_options.precondition_noise = r.config.preconditioned_noise();
  engine_options.precision = r.precision;
  engine_options.task = r.task();
  r.engine =
      std::make_unique<AccumulationEngine>(r.model, *r.optimizer, *r.reducer, engine_options);
  if (r.config.bn_mode == BatchNormMode::Window && uses_batch_statistics(*r.model))
    r.window_bn = std::make_unique<WindowBatchNorm>(r.model, kBatchNormMomentum, r.precision);
  if (r.state.at.micro_step > 0)
    r.engine->restore_window(partial.window, partial.gradients);
}

// --threads auto: 1 against the CPUs available, timed on a real micro-batch.
void tune_threads(TrainingRun& r, Console& console) {
  if (r.config.threads != 0) {
    console.say("threads: " + std::to_string(r.threads) + " (--threads)");
    return;
  }
  if (r.device.is_cuda()) {
    // The host only queues kernels and gathers batches: its thread count is not what a
    // micro-step's time depends on, and timing it would train a copy on the GPU for nothing.
    console.say("threads: " + std::to_string(r.threads) + " (not measured: the model runs on " +
                r.device.str() + ")");
    torch::set_num_threads(static_cast<int>(r.threads));
    return;
  }
  try {
    // Under a token budget the plan's micro-batch is the whole window; a micro-step holds at
    // most the budget's rows of full length.
    const int64_t rows =
        r.config.micro_batch_tokens > 0
            ? std::max<int64_t>(1, r.config.micro_batch_tokens / r.data.train.width())
            : r.state.schedule->plan().micro_batch_size;
    BatchAssembler probe_batch(r.data.train, rows);
    const Batch batch = probe_batch.gather(
        epoch_order(r.config.seed, 0, r.data.train.size(), Shuffle::Off), 0, rows);
    const Task task = r.task();
    const auto micro_step = [&](torch::nn::Sequential& model) {
      backward_through(*model, task.loss(model, batch, Precision::Fp32).loss_sum);
    };
    const ThreadChoice choice = measure_fastest_thread_count(r.model, micro_step, r.threads);
    r.threads = choice.threads;
    console.say("threads: " + choice.describe());
  } catch (const c10::OutOfMemoryError&) {
    // The model's copy does not fit beside it; the training window's back-off handles the
    // micro-batch itself.
    console.say("threads: " + std::to_string(r.threads) +
                " (not measured: a measuring copy of the model does not fit the memory budget)");
  } catch (const c10::Error& e) {
    // A C++ program's module that is not torch::nn::Cloneable cannot be copied to measure on.
    if (!is_custom(r.config.model))
      throw;
    console.say("threads: " + std::to_string(r.threads) +
                " (not measured: the model cannot be cloned; derive it from torch::nn::Cloneable, "
                "or set threads)");
  }
  torch::set_num_threads(static_cast<int>(r.threads));
  // The resolved configuration names the count, so --config repeats the run exactly.
  r.config.threads = r.threads;
  if (r.job.is_main())
    atomic_write_file(r.run_dir + "/config.toml",
                      render_toml_config(r.config.with_absolute_paths()));
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
    if (config.tensorboard) {
      r.tensorboard = std::make_unique<TensorBoardLog>(r.run_dir, r.run_dir + "/metrics.jsonl");
    } else if (const int64_t removed = r.resuming ? remove_event_files(r.run_dir) : 0) {
      console.say("--no-tensorboard: removed the run's " +
                  count_of(removed, "TensorBoard event file") +
                  " (they may show updates past the checkpoint)");
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
                                                 {"hidden", join(hidden, ",")},
                                                 {"step", std::to_string(step)},
                                                 {"inputs", inputs}};
  // The sentencepiece model the ids mean something in: sample refuses another under its name.
  if (const std::string model = config.sentencepiece_model(); !model.empty())
    metadata["tokenizer_digest"] = file_digest(model);
  if (config.pixel_std > 0) {
    // Exact (shortest round-trip), for a user who wants the very inputs of training.
    metadata["pixel_mean"] = format_double(config.pixel_mean);
    metadata["pixel_std"] = format_double(config.pixel_std);
  }
  return metadata;
}

}  // namespace

std::string default_run_directory(const std::string& prefix) {
  const std::string stamp = prefix + default_run_timestamp();
  std::string dir = std::string("runs/") + stamp;
  for (int suffix = 2; path_exists(dir); ++suffix)
    dir = std::string("runs/") + stamp + "-" + std::to_string(suffix);
  return dir;
}

void TrainingRun::save_model_weights(const std::string& path, int64_t step,
                                     const std::map<std::string, std::string>& extra) const {
  auto meta = weights_metadata(config, step);
  // The samples' shape and targets: predict builds the model from them, without the data.
  meta.merge(sample_layout(data.train));
  for (const auto& [key, value] : extra)
    meta[key] = value;
  save_weights(path, *model.ptr(), meta);  // reads the weights; the holder is const
}

JobPlace read_job_place() {
  JobPlace job;
  job.env = read_dist_environment(process_environment);
  if (job.env) {
    job.world_size = job.env->world_size;
    job.rank = job.env->rank;
  }
  return job;
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
  atomic_write_file(run_dir + "/config.toml", render_toml_config(config.with_absolute_paths()));
  atomic_write_file(run_dir + "/plan.txt", format_plan_text(resolved_now()));
}

TrainingRun set_up_training(const TrainConfig& requested, const JobPlace& job, Console& console,
                            const CustomProblem* problem) {
  requested.validate();
  // Outputs that cannot be written fail now, not after the training they would hold.
  if (!requested.save_weights.empty() && job.is_main())  // only rank 0 writes it
    check_output_file(requested.save_weights, "--save-weights");
  // So do an --out that holds a run and a module that is not there, before the data loads (a
  // corpus can take minutes). Both are checked again where they are used.
  if (requested.resume.empty() && !requested.out.empty() && job.is_main())
    refuse_used_run_directory(requested.out, LockHeld::No);
  if (is_torchscript_model(requested.model))
    check_model_file_exists(torchscript_path(requested.model));
  TrainConfig resolved_config = requested;
  // Before the data loads: a device that cannot work is said at once.
  const torch::Device device =
      resolve_device(resolved_config.device, job.local_rank(), job.world_size);
  start_memory_accounting(resolved_config, device);
  const int64_t threads = resolve_thread_count(resolved_config.threads);
  const bool flushing_denormals = configure_cpu(resolved_config, threads);

  check_config(problem == nullptr ||
                   (is_custom(resolved_config.model) && is_custom(resolved_config.dataset)),
               "a C++ program's model and data are named cpp:NAME in the configuration, got "
               "model '" +
                   resolved_config.model + "' and dataset '" + resolved_config.dataset + "'",
               "set config.model and config.dataset to \"cpp:NAME\" (docs/library.md)");
  DatasetSplits data = problem ? problem->data : load_data_outside_budget(resolved_config);
  if (problem) {
    check_config(data.train.size() > 0 && data.train.classes > 0,
                 "the C++ program's training data is empty or names no classes",
                 "fill CustomProblem::data.train and set its classes");
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
  auto reducer = make_reducer(job, resolved_config);
  // Before any other collective (--micro-batch auto broadcasts its choice): ranks started with
  // other flags stop here, together, each naming what differs.
  check_ranks_agree(*reducer, [&] { return describe_configuration(requested); });
  if (resolved_config.micro_batch_auto)
    choose_micro_batch(resolved_config, data.train, job, *reducer, console, make_model);
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
  r.device = device;
  r.threads = threads;
  r.run_dir = config.out.empty() ? default_run_directory() : config.out;
  r.resuming = !config.resume.empty();
  announce_run(r, flushing_denormals, console);

  torch::manual_seed(config.seed);
  r.model = make_model ? make_model() : build_model(config, r.data.train);
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
    r.directory_lock = prepare_run_directory(r.run_dir);
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
