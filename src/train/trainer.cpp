#include "train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "config/option_table.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/text.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/collective_reducer.h"
#include "dist/environment.h"
#include "io/safetensors.h"
#include "memory/tracking_allocator.h"
#include "models/models.h"
#include "report/files.h"
#include "report/html_report.h"
#include "report/metrics_writer.h"
#include "report/plan_report.h"
#include "report/progress.h"
#include "runtime/interrupts.h"
#include "runtime/runtime_env.h"
#include "schedule/adascale.h"
#include "stats/gradient_noise.h"
#include "train/accumulation_engine.h"
#include "train/evaluate.h"
#include "train/gradient_reducer.h"
#include "train/micro_batch_fit.h"
#include "train/optimizer.h"
#include "train/run_setup.h"
#include "train/thread_tuning.h"
#include "train/window_batch_norm.h"

namespace bigbatch {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Evaluation needs no saved activations, so it may run in larger batches than training; but not
// so large that one activation passes glibc's largest mmap threshold (32 MiB, which bigbatch
// sets): such blocks are mapped, faulted in page by page and unmapped again for every batch.
// At 1000 the cnn's first activation is 83 MiB; at 250 it is 21 MiB, and evaluating the 10,000
// test images took ~0.6 s less with 660,000 fewer page faults (measured, 2 threads).
constexpr int64_t kEvalBatchSize = 250;

std::string default_run_directory() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  std::string dir = std::string("runs/") + stamp;
  for (int suffix = 2; path_exists(dir); ++suffix)
    dir = std::string("runs/") + stamp + "-" + std::to_string(suffix);
  return dir;
}

// A run directory is never reused: a finished run's files are worth more than a typo in --out.
void prepare_run_directory(const std::string& dir) {
  for (const char* file : {"metrics.jsonl", "weights.safetensors", "config.toml"}) {
    if (path_exists(dir + "/" + file)) {
      throw Error(ErrorKind::Io, "run directory '" + dir + "' already holds a run (" + file + ")",
                  "choose another --out, or delete that directory");
    }
  }
  ensure_directory(dir);
}

std::map<std::string, std::string> weights_metadata(const TrainConfig& config, int64_t step) {
  return {{"format", "pt"},
          {"producer", "bigbatch"},
          {"model", config.model},
          {"hidden", join(
                         [&] {
                           std::vector<std::string> parts;
                           for (int64_t w : config.hidden)
                             parts.push_back(std::to_string(w));
                           return parts;
                         }(),
                         ",")},
          {"step", std::to_string(step)}};
}

nlohmann::json eval_record(const std::string& prefix, const EvalResult& r) {
  return {{prefix + "_loss", r.loss}, {prefix + "_accuracy", r.accuracy}};
}

std::string epoch_summary(const nlohmann::json& record, const TrainingProgress& at) {
  std::string text = "epoch " + std::to_string(record["epoch"].get<int64_t>());
  if (record.contains("partial_epoch")) {
    text += " (first " + format_double(std::round(100 * record["partial_epoch"].get<double>())) +
            "%, where the run ends)";
  }
  char line[256];
  if (record["train_loss"].is_null()) {
    text += ": train loss - (every update skipped)";
  } else {
    std::snprintf(line, sizeof line, ": train loss %.4f acc %.2f%%",
                  record["train_loss"].get<double>(), 100 * record["train_accuracy"].get<double>());
    text += line;
  }
  std::snprintf(line, sizeof line, " | test loss %.4f acc %.2f%% | %s samples/s",
                record["test_loss"].get<double>(), 100 * record["test_accuracy"].get<double>(),
                human_count(double(at.samples_seen) / at.train_seconds).c_str());
  text += line;
  if (record.contains("val_accuracy")) {
    text += " | val acc " +
            format_double(std::round(1e4 * record["val_accuracy"].get<double>()) / 100) + "%";
  }
  return text;
}

// Cuts metrics.jsonl back to what it held when the checkpoint was written. The file may not be
// as the checkpoint left it (an older checkpoint without its length, a file edited or shortened
// since): then the lines of steps after the checkpoint's are dropped instead. Returns whether
// the cut was exact.
bool keep_metrics_of_checkpoint(const std::string& path, const TrainingProgress& progress) {
  if (!path_exists(path))
    return false;
  const std::string text = read_text_file(path);
  const auto length = static_cast<size_t>(std::max<int64_t>(0, progress.metrics_bytes));
  if (progress.metrics_bytes >= 0 && length <= text.size() &&
      (length == 0 || text[length - 1] == '\n')) {
    if (length < text.size())
      atomic_write_file(path, text.substr(0, length));
    return true;
  }
  std::string kept;
  for (const auto& line : split(text, '\n')) {
    if (line.empty())
      continue;
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded())
      continue;  // a line cut short by a crash
    if (record.contains("step") && record["step"].get<int64_t>() > progress.step)
      continue;
    kept += line + "\n";
  }
  atomic_write_file(path, kept);
  return false;
}

}  // namespace

TrainResult run_training(const TrainConfig& requested) {
  const auto run_start = Clock::now();
  requested.validate();
  // What the run resolves (a measured micro-batch, thread count) is written back here, so
  // config.toml repeats the run exactly.
  TrainConfig config = requested;
  start_memory_accounting(config);

  // Where this process stands in the job: one process, or a rank of a launcher's job.
  const auto env = read_dist_environment(process_environment);
  const int64_t world_size = env ? env->world_size : 1;
  const int64_t rank = env ? env->rank : 0;
  const bool is_main = rank == 0;
  // Only rank 0 talks, writes and evaluates; metrics that differ per rank are reduced first.
  Progress progress(is_main ? parse_progress_mode(config.progress) : ProgressMode::Off, stderr);
  auto say = [&](const std::string& line) {
    if (is_main)
      progress.message(line);
  };

  int64_t threads = config.threads > 0 ? config.threads : default_thread_count();
  const bool flushing_denormals = configure_cpu(config, threads);

  const DatasetSplits data = load_data_outside_budget(config);
  std::unique_ptr<GradientReducer> reducer;
  if (world_size > 1) {
    CollectiveOptions options;
    options.timeout_seconds = config.dist_timeout;
    options.bucket_bytes = static_cast<int64_t>(config.bucket_mb * 1024 * 1024);
    reducer = make_collective_reducer(*env, options);
  } else {
    reducer = std::make_unique<LocalReducer>();
  }
  if (config.micro_batch_auto) {
    // Measured on every rank (each has the same budget); rank 0's choice is everyone's, since
    // timings differ between processes.
    // Under a ramp the micro-batch serves every step, so it is fitted to the smallest.
    int64_t global = config.global_batch.value_or(kDefaultGlobalBatchSize);
    if (!config.global_batch_schedule.empty()) {
      const auto steps = GlobalBatchSchedule::parse(config.global_batch_schedule).steps();
      global = std::min_element(steps.begin(), steps.end(), [](const auto& a, const auto& b) {
                 return a.global_batch < b.global_batch;
               })->global_batch;
    }
    const FitResult fit =
        measure_micro_batch_fit(config, data.train, std::max<int64_t>(1, global / world_size),
                                /*quiet=*/true);
    if (fit.max_micro_batch == 0) {
      throw Error(ErrorKind::Memory,
                  "not even a micro-batch of 1 fits the memory budget of " +
                      human_bytes(double(fit.budget_bytes)) + " (with the " +
                      format_double(100 * config.fit_margin) + "% margin) for " + config.model,
                  "raise --memory-budget, or lower --fit-margin");
    }
    std::vector<torch::Tensor> choice = {torch::tensor(
        {fit.fastest_micro_batch > 0 ? fit.fastest_micro_batch : fit.max_micro_batch})};
    reducer->broadcast_from_first_rank(choice);
    config.micro_batch = choice[0].item<int64_t>();
    config.micro_batch_auto = false;
    say("micro-batch auto: " + std::to_string(*config.micro_batch) + " (the fastest size that " +
        "fits " + human_bytes(double(fit.usable_bytes)) + " = budget " +
        human_bytes(double(fit.budget_bytes)) + " less the margin; largest fitting " +
        std::to_string(fit.max_micro_batch) + "; 'bigbatch fit' shows the table)");
  }
  // Resolved on every rank from the same inputs, so a bad plan fails everywhere alike. The
  // plan's micro-batch may shrink later (out-of-memory back-off); its global batch never does.
  ResolvedRun run = resolve_run(config, data.train.size(), world_size);

  TrainResult result;
  result.run_dir = config.out.empty() ? default_run_directory() : config.out;
  const bool resuming = !config.resume.empty();
  auto write_run_description = [&] {
    atomic_write_file(result.run_dir + "/config.toml", render_toml_config(config));
    atomic_write_file(result.run_dir + "/plan.txt", format_plan_text(run));
  };

  say("bigbatch: " + config.model + " on " + config.dataset + " (" +
      std::to_string(data.train.size()) + " train, " + std::to_string(data.validation.size()) +
      " validation, " + std::to_string(data.test.size()) + " test samples), " +
      (world_size > 1 ? std::to_string(world_size) + " ranks (" + env->source + "), " : "") +
      runtime_environment_summary() +
      (flushing_denormals ? ", denormals flushed to zero" : ", denormals kept"));
  say("batch plan: global batch " + run.plan.describe() + " (" +
      (run.plan.derived.empty() ? std::string("all given") : run.plan.derived + " derived") +
      "); " + std::to_string(run.epoch.updates_per_epoch) + " updates and " +
      std::to_string(run.epoch.micro_steps_per_epoch) + " micro-steps per epoch" +
      (world_size > 1 ? " per rank" : ""));
  if (run.ramp) {
    say("global batch schedule " + run.ramp->batches.to_string() + ": " +
        std::to_string(run.ramp->phases.size()) + " steps, " + std::to_string(run.total_updates) +
        " updates; lr " + format_double(config.lr) + " @ " +
        std::to_string(run.ramp->reference_batch) + ", " +
        to_string(run.schedule.config().scaling) + " with the batch; warmup and " +
        to_string(run.schedule.config().kind) + " schedule counted in samples (" +
        std::to_string(run.schedule.config().warmup_updates) + " and " +
        std::to_string(run.schedule.config().total_updates) + " updates of " +
        std::to_string(run.ramp->reference_batch) + ")");
  } else {
    say(run.schedule.describe_scaling() + ", warmup " +
        std::to_string(run.schedule.config().warmup_updates) + " updates, " +
        to_string(run.schedule.config().kind) + " schedule over " +
        std::to_string(run.total_updates) + " updates");
  }
  for (const auto& warning : run.epoch.warnings)
    say("warning: " + warning);
  if (const auto advice = run.schedule.advice())
    say("warning: " + *advice);

  torch::manual_seed(config.seed);
  auto model = build_model(config, data.train);
  if (!config.init_weights.empty())
    load_weights(config.init_weights, *model);
  // Only now, with the data, the plan and the weights accepted, does a new run directory
  // appear: bad input leaves nothing behind.
  // A new run never reuses a finished run's directory. A resumed run continues in its own, and
  // rewrites its description only once the checkpoint has been accepted.
  if (is_main && !resuming) {
    prepare_run_directory(result.run_dir);
    write_run_description();
  }

  {
    // Every rank starts from rank 0's weights, whatever its seed or file did.
    std::vector<torch::Tensor> state;
    for (auto& named : model_state(*model))
      state.push_back(named.second);
    torch::NoGradGuard no_grad;
    reducer->broadcast_from_first_rank(state);
  }
  const double bn_momentum = prepare_for_training(model, config, run.plan.accumulation_steps);
  if (config.bn_mode == "window" && uses_batch_statistics(*model)) {
    say("note: --bn-mode window: " + config.model + " normalises every micro-batch with the " +
        "statistics of its whole window of " + std::to_string(run.plan.per_rank_batch_size()) +
        " samples" + (world_size > 1 ? " (each rank its share)" : "") +
        ", measured by a statistics pass per BatchNorm layer; the normalisation equals one big "
        "batch's, the gradient lacks the term through the statistics (bigbatch verify "
        "measures it)");
  } else if (uses_batch_statistics(*model) &&
             run.plan.accumulation_steps * run.plan.world_size > 1) {
    say("note: " + config.model + " normalises over each micro-batch of " +
        std::to_string(run.plan.micro_batch_size) +
        " samples (ghost batch norm), so its updates differ from one batch of " +
        std::to_string(run.plan.global_batch_size) +
        "; --norm group or --bn-mode frozen make them exact. Running statistics: momentum " +
        format_significant(bn_momentum) + " per micro-step" +
        (config.bn_momentum_correction
             ? " (= " + format_significant(kBatchNormMomentum) + " per update of " +
                   std::to_string(run.plan.accumulation_steps) + " micro-batches)"
             : std::string(" (uncorrected)")));
  } else if (config.bn_mode == "frozen" && config.model == "cnn-bn" && config.norm == "batch") {
    say("note: BatchNorm frozen: its running statistics normalise in training too, so "
        "accumulation equals one batch; from scratch they are the identity (mean 0, variance "
        "1) — frozen suits fine-tuning from --init-weights");
  }

  auto save_final = [&](int64_t step) {
    if (!is_main)
      return;
    const auto meta = weights_metadata(config, step);
    save_weights(result.run_dir + "/weights.safetensors", *model, meta);
    if (!config.save_weights.empty())
      save_weights(config.save_weights, *model, meta);
  };

  if (run.total_updates == 0) {
    save_final(0);
    say("--max-updates 0: wrote the initial weights to " + result.run_dir + "/weights.safetensors");
    result.total_seconds = seconds_since(run_start);
    return result;
  }

  OptimizerSettings optimizer_settings = OptimizerSettings::from(config);
  if (run.adam) {
    optimizer_settings.adam_beta1 = run.adam->beta1;
    optimizer_settings.adam_beta2 = run.adam->beta2;
    optimizer_settings.adam_eps = run.adam->eps;
    say("adamw under the square-root rule (--adam-sqrt-adjust): beta1 " +
        format_significant(run.adam->beta1) + ", beta2 " + format_significant(run.adam->beta2) +
        ", eps " + format_significant(run.adam->eps));
  }
  auto optimizer = make_optimizer(optimizer_settings, model->parameters());
  const nlohmann::json identity = checkpoint_identity(
      config.model, config.hidden, config.dataset, data.train.size(), run.plan.global_batch_size,
      config.seed, config.shuffle, to_string(config.optimizer));
  TrainingProgress at;
  PartialWindow partial;
  // The update whose announcements metrics.jsonl already holds: one a checkpoint inside its
  // window was taken in, when the file was cut back exactly to that checkpoint (-1: none).
  int64_t update_already_logged = -1;
  if (resuming) {
    // Every rank reads the checkpoint (a shared file system across machines is assumed).
    at = read_checkpoint(config.resume, identity, *model, *optimizer, &partial);
    if (run.ramp && at.global_batch > 0 && at.global_batch != run.plan.global_batch_size) {
      // The ramp's step of the last update done; the next update switches on from there.
      run.plan = plan_for_ramp_step(at.global_batch, run.plan.micro_batch_size, world_size);
      run.epoch = plan_epoch(run.plan, data.train.size(), config.last_window);
      prepare_for_training(model, config, run.plan.accumulation_steps);
    }
    say("resumed from " + config.resume + " at update " + std::to_string(at.step) + " (epoch " +
        std::to_string(at.epoch + 1) + ", " + std::to_string(at.samples_seen) +
        " samples seen); batch plan " + run.plan.describe());
    const bool resumed_inside_window = at.micro_step > 0;
    if (at.micro_step > 0 && (partial.micro_batch_size != run.plan.micro_batch_size ||
                              partial.world_size != world_size)) {
      // The partial gradient belongs to another cut of the window: redo the window instead,
      // on the same samples, so the mathematics is unchanged.
      say("the checkpoint is " + std::to_string(at.micro_step) + " micro-steps into update " +
          std::to_string(at.step + 1) + " under micro " + std::to_string(partial.micro_batch_size) +
          " x world " + std::to_string(partial.world_size) +
          "; that window is replayed from its start with the new plan");
      at.micro_step = 0;
    }
    if (at.position_in_epoch < 0) {  // a checkpoint from before positions were saved
      at.position_in_epoch = at.update_in_epoch * run.plan.global_batch_size;
    }
    if (at.position_in_epoch > data.train.size()) {
      throw Error(ErrorKind::Format,
                  "checkpoint '" + config.resume + "' is at sample " +
                      std::to_string(at.position_in_epoch) + " of an epoch of " +
                      std::to_string(data.train.size()),
                  "resume with the dataset and --train-subset the run was started with");
    }
    if (is_main) {
      write_run_description();
      // Lines the interrupted run wrote after its checkpoint are replayed now: drop them.
      if (keep_metrics_of_checkpoint(result.run_dir + "/metrics.jsonl", at) &&
          resumed_inside_window)
        update_already_logged = at.step + 1;
    }
  }
  std::unique_ptr<MetricsWriter> metrics;
  if (is_main)
    metrics = std::make_unique<MetricsWriter>(result.run_dir + "/metrics.jsonl");

  const Precision precision = parse_precision(config.precision);
  EngineOptions engine_options{config.clip_norm, config.noise_scale};
  engine_options.precision = precision;
  if (precision == Precision::Bf16) {
    say(cpu_has_native_bf16()
            ? "precision: bf16 forward passes (autocast), fp32 weights, loss and gradient "
              "accumulation"
            : "warning: --precision bf16 on a CPU without native bf16 (no AVX-512 BF16 or AMX): "
              "emulated, likely slower than fp32");
  }
  AccumulationEngine engine(model, *optimizer, *reducer, engine_options);
  // --bn-mode window: each window's statistics pass, and the running statistics around it.
  std::unique_ptr<WindowBatchNorm> window_bn;
  if (config.bn_mode == "window" && uses_batch_statistics(*model))
    window_bn = std::make_unique<WindowBatchNorm>(model, kBatchNormMomentum, precision);
  if (at.micro_step > 0) {
    engine.restore_window(partial.totals, partial.gradients);
  }
  // The batch buffer belongs to the micro-steps' memory: it is allocated inside the window
  // that the out-of-memory back-off protects, and rebuilt smaller after a back-off.
  std::unique_ptr<BatchAssembler> assembler;
  if (config.threads == 0) {
    try {
      BatchAssembler probe_batch(data.train, run.plan.micro_batch_size);
      const ThreadChoice choice = measure_fastest_thread_count(
          model,
          probe_batch.gather(epoch_order(config.seed, 0, data.train.size(), Shuffle::Off), 0,
                             run.plan.micro_batch_size),
          threads);
      threads = choice.threads;
      say("threads: " + choice.describe());
    } catch (const c10::OutOfMemoryError&) {
      // The model's copy does not fit beside it; the training window's back-off handles the
      // micro-batch itself.
      say("threads: " + std::to_string(threads) +
          " (not measured: a measuring copy of the model does not fit the memory budget)");
    }
    torch::set_num_threads(static_cast<int>(threads));
    // The resolved configuration names the count, so --config repeats the run exactly.
    config.threads = threads;
    if (is_main)
      atomic_write_file(result.run_dir + "/config.toml", render_toml_config(config));
  } else {
    say("threads: " + std::to_string(threads) + " (--threads)");
  }

  const Cadence cadence =
      config.checkpoint_every.empty() ? Cadence{} : Cadence::parse(config.checkpoint_every);
  const int64_t cadence_updates =
      cadence.amount ? std::max<int64_t>(1, cadence.amount->to_updates(run.plan, run.epoch)) : 0;
  int64_t last_checkpoint_step = at.step;
  auto last_checkpoint_time = Clock::now();
  int64_t micro_steps_since_checkpoint = 0;
  // A checkpoint's metrics lines reach the file before it does: a run killed after it
  // resumes with every line up to it.
  auto flush_metrics = [&] {
    if (metrics) {
      metrics->flush();
      at.metrics_bytes = metrics->flushed_bytes();
    }
  };
  auto checkpoint_inside_window = [&] {
    flush_metrics();
    PartialWindow window{run.plan.micro_batch_size, world_size, engine.window_state(), {}};
    for (const auto& p : model->parameters())
      window.gradients.push_back(p.grad());
    if (window_bn)
      window_bn->suspend();  // the checkpoint holds the running statistics, not the window's
    write_checkpoint(result.run_dir, at, identity, *model, *optimizer, config.keep_checkpoints,
                     plan_json(run), &window);
    if (window_bn)
      window_bn->resume();
    micro_steps_since_checkpoint = 0;
  };
  auto checkpoint = [&](const TrainingProgress& p) {
    flush_metrics();
    if (is_main)
      write_checkpoint(result.run_dir, p, identity, *model, *optimizer, config.keep_checkpoints,
                       plan_json(run));
    last_checkpoint_step = p.step;
    last_checkpoint_time = Clock::now();
    micro_steps_since_checkpoint = 0;
  };
  auto checkpoint_due = [&](int64_t step) {
    if (cadence_updates > 0 && step - last_checkpoint_step >= cadence_updates)
      return true;
    return cadence.seconds > 0 && seconds_since(last_checkpoint_time) >= cadence.seconds;
  };

  // Out of memory inside a window (a budget lowered on resume, fragmentation, a larger
  // sample): throw the partial window away, halve the micro-batch, raise accumulation, and
  // replay the same samples. The global batch, the samples and the mathematics stay the same
  // (except BatchNorm's statistics, which follow the micro-batch).
  auto back_off = [&](const c10::OutOfMemoryError& oom) {
    engine.discard();
    at.micro_step = 0;
    const std::string what = oom.what_without_backtrace();
    const int64_t from = run.plan.micro_batch_size;
    if (world_size > 1) {
      throw Error(ErrorKind::Memory,
                  "rank " + std::to_string(rank) + " ran out of memory at micro-batch " +
                      std::to_string(from) + " (" + what + ")",
                  "lower --micro-batch or raise --memory-budget (ranks do not back off together "
                  "yet)");
    }
    if (from == 1) {
      throw Error(ErrorKind::Memory,
                  "out of memory at micro-batch 1, the smallest there is (" + what + ")",
                  "raise --memory-budget, or train a smaller model");
    }
    const int64_t to = from / 2;
    const bool batch_norm = uses_batch_statistics(*model);
    if (batch_norm && config.strict_batch) {
      throw Error(ErrorKind::Memory,
                  "--strict-batch: out of memory at micro-batch " + std::to_string(from) +
                      ", and backing off would change " + config.model +
                      "'s normalisation batch to " + std::to_string(to),
                  "raise --memory-budget, or start with --micro-batch " + std::to_string(to));
    }
    run.plan = run.plan.with_micro_batch(to);
    run.epoch = plan_epoch(run.plan, data.train.size(), config.last_window);
    assembler.reset();  // the next window allocates the smaller buffer
    prepare_for_training(model, config, run.plan.accumulation_steps);  // BatchNorm momentum
    ++at.oom_backoffs;
    say("warning: out of memory in update " + std::to_string(at.step + 1) + " at micro-batch " +
        std::to_string(from) + " (" + what + "); backing off to " + run.plan.describe() +
        ": the same global batch, the window replayed from its first sample");
    if (batch_norm) {
      say("warning: " + config.model + " now normalises over micro-batches of " +
          std::to_string(to) + " instead of " + std::to_string(from) +
          ", which changes its updates (use cnn-gn to be independent of the micro-batch)");
    }
    if (is_main) {
      metrics->write({{"event", "oom_backoff"},
                      {"step", at.step},
                      {"micro_batch_from", from},
                      {"micro_batch", to},
                      {"accumulation_steps", run.plan.accumulation_steps},
                      {"global_batch", run.plan.global_batch_size},
                      {"error", what}});
    }
  };

  // The process's resident peak from here on is training's, not the data loader's transient
  // buffers'; where it starts is recorded, so the growth is known.
  reset_peak_rss();
  // Wall-clock time from here, everything included (metrics, progress, checkpoints): what a
  // stopwatch beside the run would read, unlike train_seconds, which times the updates alone.
  const auto train_start = Clock::now();
  if (is_main) {
    metrics->write({{"event", "train_start"},
                    {"step", at.step},
                    {"tensor_bytes", memory_counters().current_bytes},
                    {"rss_bytes", current_rss_bytes()}});
  }

  // The gradient noise scale from the two batch sizes every accumulating update has.
  NoiseScaleTracker noise;
  noise.restore(at.noise);

  int64_t skipped_updates = 0;
  int64_t bad_in_a_row = 0;
  int64_t epoch_peak_bytes = 0;
  bool target_reached = false;  // --target-accuracy met at an epoch's end
  EvalResult last_test;
  // The record of an epoch — or of the part of one where the run ends inside it (--max-updates,
  // AdaScale's scale-invariant length) — with its evaluation and the --target-accuracy check.
  auto record_epoch = [&](bool ends_inside) {
    at.recorded_epoch_step = at.step;
    if (is_main) {
      // An epoch whose updates were all skipped (non-finite) has no training figures.
      const auto per_item = [&](double total) {
        return at.epoch_items > 0 ? nlohmann::json(total / double(at.epoch_items))
                                  : nlohmann::json(nullptr);
      };
      nlohmann::json record = {
          {"epoch", at.epoch + 1},
          {"step", at.step},
          {"samples_seen", at.samples_seen},
          {"train_loss", per_item(at.epoch_loss_sum)},
          {"train_accuracy", per_item(double(at.epoch_correct))},
          {"train_seconds", at.train_seconds},
          {"peak_bytes", epoch_peak_bytes},
          {"rss_peak_bytes", peak_rss_bytes()},
          {"micro_batch", run.plan.micro_batch_size},
          {"oom_backoffs", at.oom_backoffs},
          {"grad_noise_scale",
           noise.noise_scale() ? nlohmann::json(*noise.noise_scale()) : nlohmann::json(nullptr)}};
      if (ends_inside) {
        record["partial_epoch"] =
            run.ramp ? double(at.position_in_epoch) / double(data.train.size())
                     : double(at.update_in_epoch) / double(run.epoch.updates_per_epoch);
      }
      // Under a budget, evaluation runs at the training micro-batch, which inference (no
      // saved activations, no gradients) always fits.
      const int64_t eval_batch = config.memory_budget > 0
                                     ? std::min(kEvalBatchSize, run.plan.micro_batch_size)
                                     : kEvalBatchSize;
      if (data.validation.size() > 0) {
        record.update(eval_record("val", evaluate(model, data.validation, eval_batch, precision)));
      }
      last_test = evaluate(model, data.test, eval_batch, precision);
      record.update(eval_record("test", last_test));
      metrics->write(record);
      metrics->flush();
      progress.message(epoch_summary(record, at));
      if (config.target_accuracy > 0) {
        // Validation accuracy when there is a validation split: the test set is not for
        // decisions.
        const char* metric = data.validation.size() > 0 ? "val_accuracy" : "test_accuracy";
        const double accuracy = record[metric].get<double>();
        if (accuracy >= config.target_accuracy) {
          target_reached = true;
          metrics->write({{"event", "target_reached"},
                          {"step", at.step},
                          {"epoch", at.epoch + 1},
                          {"samples_seen", at.samples_seen},
                          {"train_seconds", at.train_seconds},
                          {"metric", metric},
                          {"accuracy", accuracy},
                          {"target", config.target_accuracy}});
          say("target reached: " + std::string(metric) + " " + format_significant(100 * accuracy) +
              "% >= " + format_significant(100 * config.target_accuracy) + "% after " +
              std::to_string(at.step) + " updates, " + std::to_string(at.samples_seen) +
              " samples, " + human_duration(at.train_seconds) + " of training; stopping");
        }
      }
    }
  };

  // The run's length: --epochs and --max-updates, or AdaScale's scale-invariant updates.
  auto run_complete = [&] {
    if (run.adascale)
      return at.scale_invariant_step >= double(run.adascale->scale_invariant_total) - 1e-9 ||
             at.step >= run.total_updates;
    return at.step >= run.total_updates;
  };
  // The global batch of the next update: the plan's, or the ramp's at the current position.
  const int64_t dataset_size = data.train.size();
  auto next_global_batch = [&] {
    return run.ramp ? run.ramp->batches.global_batch_at(
                          {at.samples_seen, at.epoch, at.position_in_epoch}, dataset_size)
                    : run.plan.global_batch_size;
  };
  // Whether the epoch's order has no window left (under --last-window drop, none that the
  // next update's batch fills).
  auto epoch_used_up = [&] {
    const int64_t rest = dataset_size - at.position_in_epoch;
    return rest == 0 || (config.last_window == LastWindow::Drop && rest < next_global_batch());
  };
  // --global-batch-schedule: at the first update boundary past a threshold, the next step's
  // plan — the same micro-batch (after any back-off), accumulation re-derived, BatchNorm's
  // momentum recomputed. A window resumed from a checkpoint began under the batch that the
  // same position selects, so it continues unchanged.
  auto follow_batch_schedule = [&] {
    const int64_t global = next_global_batch();
    if (global == run.plan.global_batch_size)
      return;
    const int64_t from = run.plan.global_batch_size;
    run.plan = plan_for_ramp_step(global, run.plan.micro_batch_size, world_size);
    run.epoch = plan_epoch(run.plan, dataset_size, config.last_window);
    prepare_for_training(model, config, run.plan.accumulation_steps);
    const double next_lr = ramp_learning_rate(run, at.samples_seen, global);
    say("global batch " + std::to_string(from) + " -> " + run.plan.describe() + " at update " +
        std::to_string(at.step + 1) + " (" + std::to_string(at.samples_seen) +
        " samples seen); lr now " + format_significant(next_lr, 4));
    if (is_main && at.step + 1 != update_already_logged) {
      // Keyed by the first update at the new batch. A run resumed from a checkpoint taken
      // before it drops the line and writes it again; one resumed from inside that update's
      // window kept it (it was written before the checkpoint) and announces it on stderr only.
      metrics->write({{"event", "batch_change"},
                      {"step", at.step + 1},
                      {"samples_seen", at.samples_seen},
                      {"global_batch_from", from},
                      {"global_batch", global},
                      {"accumulation_steps", run.plan.accumulation_steps},
                      {"lr", next_lr}});
    }
  };
  InterruptGuard interrupts;
  while (at.epoch < run.epochs && !run_complete()) {
    const auto order = epoch_order(config.seed, at.epoch, data.train.size(),
                                   config.shuffle ? Shuffle::On : Shuffle::Off);
    bool stop = false;
    while (!epoch_used_up() && !run_complete() && !stop) {
      if (run.ramp)
        follow_batch_schedule();
      const auto update_start = Clock::now();
      const int64_t calls_before = reducer->calls();
      const UpdateWindow window =
          window_at(run.plan, dataset_size, config.last_window, at.position_in_epoch, rank);
      // The micro-steps of this update (from where a mid-window checkpoint left off). A single
      // process may stop or checkpoint between them; ranks of a job do so only at update
      // boundaries, where they meet.
      const int64_t count = static_cast<int64_t>(window.micro_batch_sizes.size());
      reset_peak_memory();
      bool completed = false;
      try {
        if (!assembler)
          assembler = std::make_unique<BatchAssembler>(data.train, run.plan.micro_batch_size,
                                                       /*background=*/config.prefetch);
        if (window_bn)
          window_bn->begin(*assembler, order, window);
        completed =
            run_micro_steps(engine, *assembler, order, window, at.micro_step, [&](int64_t done) {
              at.micro_step = done;
              ++micro_steps_since_checkpoint;
              if (world_size > 1 || done == count)
                return true;
              if (interrupts.requested()) {
                checkpoint_inside_window();
                return false;
              }
              if (cadence.micro_steps > 0 && micro_steps_since_checkpoint >= cadence.micro_steps)
                checkpoint_inside_window();
              return true;
            });
      } catch (const c10::OutOfMemoryError& oom) {
        if (window_bn)
          window_bn->end(/*applied=*/false);
        back_off(oom);
        continue;  // the same update again, cut smaller
      }
      if (!completed) {
        say("stopped by signal " + std::to_string(interrupts.signal_number()) + " inside update " +
            std::to_string(at.step + 1) + " after micro-step " + std::to_string(at.micro_step) +
            "; checkpoint written, continue with: bigbatch train --resume " + result.run_dir);
        throw Interrupted(interrupts.signal_number(),
                          "training interrupted inside update " + std::to_string(at.step + 1));
      }
      if (interrupts.requested())
        engine.request_stop();
      const UpdateStats stats = engine.finish_gradients();
      if (!stats.non_finite && stats.small_batch > 0 && stats.small_batch < double(stats.items)) {
        noise.add({stats.small_batch, stats.small_batch_sq_norm, double(stats.items),
                   stats.grad_norm * stats.grad_norm});
        at.noise = noise.state();
      }
      // AdaScale's gain comes from the averages that now include this update's gradients. The
      // noise sample is made of reduced values only, so every rank computes the same gain.
      const double gain =
          run.adascale && noise.state().samples > 0
              ? adascale_gain(double(stats.items), double(run.adascale->reference_batch),
                              noise.trace(), noise.gradient_sq())
                    .gain
              : 1.0;
      const double lr =
          run.adascale ? gain * run.schedule.lr_at(static_cast<int64_t>(at.scale_invariant_step))
          : run.ramp   ? ramp_learning_rate(run, at.samples_seen, run.plan.global_batch_size)
                       : run.schedule.lr_at(at.step);
      if (window_bn)
        window_bn->end(/*applied=*/!stats.non_finite);
      if (stats.non_finite) {
        engine.discard();  // one bad window must not poison the weights or the momentum
      } else {
        engine.apply(lr);
        if (run.adascale)
          at.scale_invariant_step += gain;
      }
      const int64_t peak_bytes = memory_counters().peak_bytes;
      epoch_peak_bytes = std::max(epoch_peak_bytes, peak_bytes);
      at.micro_step = 0;
      const double seconds = seconds_since(update_start);
      at.train_seconds += seconds;
      ++at.step;
      ++at.update_in_epoch;
      at.position_in_epoch += window.size;
      at.global_batch = run.plan.global_batch_size;
      at.samples_seen += stats.items;
      const std::optional<double> noise_scale = noise.noise_scale();
      if (!stats.non_finite) {
        // A skipped update consumed its samples but taught nothing: the epoch's training
        // loss and accuracy are those of the updates that were applied.
        at.epoch_loss_sum += stats.loss * double(stats.items);
        at.epoch_correct += stats.correct;
        at.epoch_items += stats.items;
      }
      stop = stats.stop_requested;
      if (stats.non_finite) {
        ++skipped_updates;
        ++bad_in_a_row;
        say("warning: update " + std::to_string(at.step) +
            " skipped: " + (std::isfinite(stats.loss) ? "gradient" : "loss") + " is not finite (" +
            std::to_string(bad_in_a_row) + " in a row)");
      } else {
        bad_in_a_row = 0;
      }
      if (is_main) {
        nlohmann::json record = {
            {"step", at.step},
            {"epoch",
             double(at.epoch) +
                 (run.ramp ? double(at.position_in_epoch) / double(dataset_size)
                           : double(at.update_in_epoch) / double(run.epoch.updates_per_epoch))},
            {"samples_seen", at.samples_seen},
            {"loss", stats.loss},
            {"lr", lr},
            {"grad_norm", stats.grad_norm},
            {"items", stats.items},
            {"micro_steps", stats.micro_steps},
            {"allreduce_calls", reducer->calls() - calls_before},
            {"samples_per_s", double(stats.items) / seconds},
            {"updates_per_s", 1.0 / seconds},
            {"wall_s", seconds_since(train_start)},
            {"skipped", stats.non_finite},
            {"skipped_updates", skipped_updates},
            {"micro_batch", run.plan.micro_batch_size},
            {"global_batch", run.plan.global_batch_size},
            {"grad_noise_scale",
             noise_scale ? nlohmann::json(*noise_scale) : nlohmann::json(nullptr)},
            {"peak_bytes", peak_bytes},
            {"rss_peak_bytes", peak_rss_bytes()}};
        if (run.adascale) {
          record["lr_gain"] = gain;
          record["scale_invariant_step"] = at.scale_invariant_step;
        }
        metrics->write(record);
        ProgressState state;
        state.epoch = at.epoch + 1;
        state.epochs = run.epochs;
        state.step_in_epoch = at.update_in_epoch;
        state.updates_per_epoch =
            run.ramp ? at.update_in_epoch +
                           (dataset_size - at.position_in_epoch + run.plan.global_batch_size - 1) /
                               run.plan.global_batch_size
                     : run.epoch.updates_per_epoch;
        state.step = at.step;
        state.total_updates = run.total_updates;
        if (run.adascale) {
          // The run ends at a scale-invariant count: its length in updates follows the mean
          // gain so far.
          const double mean_gain = std::max(1e-9, at.scale_invariant_step / double(at.step));
          state.total_updates = std::min(
              run.total_updates,
              at.step + static_cast<int64_t>(
                            std::ceil(std::max(0.0, double(run.adascale->scale_invariant_total) -
                                                        at.scale_invariant_step) /
                                      mean_gain)));
          state.epochs =
              (state.total_updates + run.epoch.updates_per_epoch - 1) / run.epoch.updates_per_epoch;
          state.lr_gain = gain;
        }
        state.loss = stats.loss;
        state.samples_per_s = double(at.samples_seen) / at.train_seconds;
        state.elapsed_s = at.train_seconds;
        state.memory_bytes = peak_bytes;
        state.global_batch = run.plan.global_batch_size;
        state.noise_scale = noise_scale.value_or(0);
        progress.update(state);
      }
      // A checkpoint at an epoch's end waits for the epoch's evaluation (below), so that a
      // resumed run does not evaluate that epoch twice.
      const bool epoch_done = epoch_used_up();
      if (bad_in_a_row >= config.max_bad_updates) {
        checkpoint(at);
        throw Error(ErrorKind::Diverged,
                    std::to_string(bad_in_a_row) +
                        " updates in a row had a non-finite loss or gradient (the last at update " +
                        std::to_string(at.step) +
                        "); they were skipped, and the weights from before them are checkpointed",
                    "lower --lr, add --warmup or --clip-norm, then --resume " + result.run_dir);
      }
      if (!epoch_done && (stop || checkpoint_due(at.step)))
        checkpoint(at);
    }
    if (epoch_used_up()) {
      record_epoch(/*ends_inside=*/false);
      if (config.target_accuracy > 0 && world_size > 1) {
        // Only rank 0 evaluates: its verdict is everyone's.
        std::vector<torch::Tensor> verdict = {torch::tensor({target_reached ? 1 : 0})};
        reducer->broadcast_from_first_rank(verdict);
        target_reached = verdict[0].item<int64_t>() != 0;
      }
      at.epoch += 1;
      epoch_peak_bytes = 0;
      at.update_in_epoch = 0;
      at.position_in_epoch = 0;
      at.epoch_loss_sum = 0;
      at.epoch_correct = 0;
      at.epoch_items = 0;
      if (stop || checkpoint_due(at.step))
        checkpoint(at);
    }
    if (stop) {
      const int signal_number = interrupts.requested() ? interrupts.signal_number() : SIGTERM;
      say("stopped by signal " + std::to_string(signal_number) + " after update " +
          std::to_string(at.step) +
          "; checkpoint written, continue with: bigbatch train --resume " + result.run_dir);
      throw Interrupted(signal_number, "training interrupted at update " + std::to_string(at.step));
    }
    if (target_reached)
      break;
  }
  // A run that ends inside an epoch is evaluated where it ends (once: a resumed run with nothing
  // left to train finds that record already written).
  if (at.update_in_epoch > 0 && !target_reached && at.recorded_epoch_step != at.step)
    record_epoch(/*ends_inside=*/true);
  if (run.adascale) {
    say(describe_adascale_run(at.step, at.scale_invariant_step, run.adascale->scale));
  }
  // The end of a run always leaves a checkpoint (with --checkpoint-every or a resume), so the
  // run can be extended later with more --epochs.
  if ((cadence.is_set() || resuming) && last_checkpoint_step != at.step)
    checkpoint(at);

  if (const auto b_noise = noise.noise_scale()) {
    say(critical_batch_verdict(double(run.plan.global_batch_size), *b_noise));
  } else if (noise.state().samples == 0) {
    say("gradient noise scale: not measured (it needs two batch sizes per update: accumulation "
        "steps of 2 or more)");
  }
  save_final(at.step);
  if (is_main) {
    metrics.reset();  // flushed and closed: the report reads every line
    say("report: " + write_run_report(result.run_dir));
  }
  result.is_main_rank = is_main;
  result.updates = at.step;
  result.samples_seen = at.samples_seen;
  result.test_loss = last_test.loss;
  result.test_accuracy = last_test.accuracy;
  result.train_seconds = at.train_seconds;
  result.samples_per_s = at.train_seconds > 0 ? double(at.samples_seen) / at.train_seconds : 0;
  result.total_seconds = seconds_since(run_start);
  return result;
}

}  // namespace bigbatch
