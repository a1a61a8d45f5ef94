#include "train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "config/option_table.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/text.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/collective_reducer.h"
#include "dist/environment.h"
#include "io/safetensors.h"
#include "models/models.h"
#include "report/files.h"
#include "report/metrics_writer.h"
#include "report/plan_report.h"
#include "report/progress.h"
#include "runtime/runtime_env.h"
#include "train/accumulation_engine.h"
#include "train/evaluate.h"
#include "train/gradient_reducer.h"
#include "train/optimizer.h"
#include "train/thread_tuning.h"

namespace bigbatch {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Evaluation needs no saved activations, so it runs in larger batches than training.
constexpr int64_t kEvalBatchSize = 1000;

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

}  // namespace

TrainResult run_training(const TrainConfig& config) {
  const auto run_start = Clock::now();
  config.validate();

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
  torch::set_num_threads(static_cast<int>(threads));
  tune_malloc();

  DatasetSplits data =
      load_idx_dataset(config.dataset_directory(), config.train_subset, config.val_size);
  // Resolved on every rank from the same inputs, so a bad plan fails everywhere alike.
  const ResolvedRun run = resolve_run(config, data.train.size(), world_size);

  TrainResult result;
  result.run_dir = config.out.empty() ? default_run_directory() : config.out;
  std::unique_ptr<MetricsWriter> metrics;
  if (is_main) {
    prepare_run_directory(result.run_dir);
    atomic_write_file(result.run_dir + "/config.toml", render_toml_config(config));
    atomic_write_file(result.run_dir + "/plan.txt", format_plan_text(run));
    metrics = std::make_unique<MetricsWriter>(result.run_dir + "/metrics.jsonl");
  }

  std::unique_ptr<GradientReducer> reducer;
  if (world_size > 1) {
    CollectiveOptions options;
    options.timeout_seconds = config.dist_timeout;
    options.bucket_bytes = static_cast<int64_t>(config.bucket_mb * 1024 * 1024);
    reducer = make_collective_reducer(*env, options);
  } else {
    reducer = std::make_unique<LocalReducer>();
  }

  say("bigbatch: " + config.model + " on " + config.dataset + " (" +
      std::to_string(data.train.size()) + " train, " + std::to_string(data.validation.size()) +
      " validation, " + std::to_string(data.test.size()) + " test samples), " +
      (world_size > 1 ? std::to_string(world_size) + " ranks (" + env->source + "), " : "") +
      runtime_environment_summary());
  say("batch plan: global batch " + run.plan.describe() + " (" +
      (run.plan.derived.empty() ? std::string("all given") : run.plan.derived + " derived") +
      "); " + std::to_string(run.epoch.updates_per_epoch) + " updates and " +
      std::to_string(run.epoch.micro_steps_per_epoch) + " micro-steps per epoch" +
      (world_size > 1 ? " per rank" : ""));
  say(run.schedule.describe_scaling() + ", warmup " +
      std::to_string(run.schedule.config().warmup_updates) + " updates, " +
      to_string(run.schedule.config().kind) + " schedule over " +
      std::to_string(run.total_updates) + " updates");
  for (const auto& warning : run.epoch.warnings)
    say("warning: " + warning);
  if (const auto advice = run.schedule.advice())
    say("warning: " + *advice);

  torch::manual_seed(config.seed);
  ModelSpec spec;
  spec.name = config.model;
  spec.hidden = config.hidden;
  spec.channels = data.train.inputs.size(1);
  spec.height = data.train.inputs.size(2);
  spec.width = data.train.inputs.size(3);
  auto model = make_model(spec);
  if (!config.init_weights.empty())
    load_weights(config.init_weights, *model);
  {
    // Every rank starts from rank 0's weights, whatever its seed or file did.
    std::vector<torch::Tensor> state;
    for (auto& named : model_state(*model))
      state.push_back(named.second);
    torch::NoGradGuard no_grad;
    reducer->broadcast_from_first_rank(state);
  }
  if (uses_batch_statistics(*model) && run.plan.accumulation_steps * run.plan.world_size > 1) {
    say("note: " + config.model + " normalises over each micro-batch of " +
        std::to_string(run.plan.micro_batch_size) +
        " samples (ghost batch norm), so its updates differ from one batch of " +
        std::to_string(run.plan.global_batch_size) + "; use cnn-gn for exact equivalence");
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

  auto optimizer = make_optimizer(OptimizerSettings::from(config), model->parameters());
  AccumulationEngine engine(model, *optimizer, *reducer, EngineOptions{config.clip_norm});
  BatchAssembler assembler(data.train, run.plan.micro_batch_size);
  model->train();
  if (config.threads == 0) {
    const ThreadChoice choice = measure_fastest_thread_count(
        model,
        assembler.gather(epoch_order(config.seed, 0, data.train.size(), Shuffle::Off), 0,
                         run.plan.micro_batch_size),
        threads);
    threads = choice.threads;
    torch::set_num_threads(static_cast<int>(threads));
    say("threads: " + choice.describe());
    if (is_main) {
      // The resolved configuration names the measured count, so --config repeats the run exactly.
      TrainConfig resolved = config;
      resolved.threads = threads;
      atomic_write_file(result.run_dir + "/config.toml", render_toml_config(resolved));
    }
  } else {
    say("threads: " + std::to_string(threads) + " (--threads)");
  }

  int64_t step = 0;
  int64_t samples_seen = 0;
  double train_seconds = 0;
  EvalResult last_test;
  for (int64_t epoch = 0; epoch < run.epochs && step < run.total_updates; ++epoch) {
    const auto order = epoch_order(config.seed, epoch, data.train.size(),
                                   config.shuffle ? Shuffle::On : Shuffle::Off);
    double epoch_loss_sum = 0;
    int64_t epoch_correct = 0;
    int64_t epoch_items = 0;
    int64_t update_in_epoch = 0;
    for (; update_in_epoch < run.epoch.updates_per_epoch && step < run.total_updates;
         ++update_in_epoch) {
      const auto update_start = Clock::now();
      const int64_t calls_before = reducer->calls();
      const UpdateWindow window = window_for_update(run.plan, run.epoch, update_in_epoch, rank);
      const double lr = run.schedule.lr_at(step);
      const UpdateStats stats = train_window(engine, assembler, order, window, lr);
      const double seconds = seconds_since(update_start);
      train_seconds += seconds;
      ++step;
      samples_seen += stats.items;
      epoch_loss_sum += stats.loss * double(stats.items);
      epoch_correct += stats.correct;
      epoch_items += stats.items;
      if (!is_main)
        continue;
      metrics->write({{"step", step},
                      {"epoch", double(epoch) + double(update_in_epoch + 1) /
                                                    double(run.epoch.updates_per_epoch)},
                      {"samples_seen", samples_seen},
                      {"loss", stats.loss},
                      {"lr", lr},
                      {"grad_norm", stats.grad_norm},
                      {"items", stats.items},
                      {"micro_steps", stats.micro_steps},
                      {"allreduce_calls", reducer->calls() - calls_before},
                      {"samples_per_s", double(stats.items) / seconds},
                      {"updates_per_s", 1.0 / seconds}});
      ProgressState state;
      state.epoch = epoch + 1;
      state.epochs = run.epochs;
      state.step_in_epoch = update_in_epoch + 1;
      state.updates_per_epoch = run.epoch.updates_per_epoch;
      state.step = step;
      state.total_updates = run.total_updates;
      state.loss = stats.loss;
      state.samples_per_s = double(samples_seen) / train_seconds;
      state.elapsed_s = train_seconds;
      progress.update(state);
    }
    if (!is_main)
      continue;
    nlohmann::json record = {{"epoch", epoch + 1},
                             {"step", step},
                             {"samples_seen", samples_seen},
                             {"train_loss", epoch_loss_sum / double(epoch_items)},
                             {"train_accuracy", double(epoch_correct) / double(epoch_items)},
                             {"train_seconds", train_seconds}};
    if (data.validation.size() > 0) {
      record.update(eval_record("val", evaluate(model, data.validation, kEvalBatchSize)));
    }
    last_test = evaluate(model, data.test, kEvalBatchSize);
    record.update(eval_record("test", last_test));
    metrics->write(record);
    char line[256];
    std::snprintf(
        line, sizeof line,
        "epoch %lld: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | %s samples/s",
        static_cast<long long>(epoch + 1), record["train_loss"].get<double>(),
        100 * record["train_accuracy"].get<double>(), last_test.loss, 100 * last_test.accuracy,
        human_count(double(samples_seen) / train_seconds).c_str());
    std::string text = line;
    if (record.contains("val_accuracy")) {
      text += " | val acc " +
              format_double(std::round(1e4 * record["val_accuracy"].get<double>()) / 100) + "%";
    }
    progress.message(text);
  }

  save_final(step);
  result.is_main_rank = is_main;
  result.updates = step;
  result.samples_seen = samples_seen;
  result.test_loss = last_test.loss;
  result.test_accuracy = last_test.accuracy;
  result.train_seconds = train_seconds;
  result.samples_per_s = train_seconds > 0 ? double(samples_seen) / train_seconds : 0;
  result.total_seconds = seconds_since(run_start);
  return result;
}

}  // namespace bigbatch
