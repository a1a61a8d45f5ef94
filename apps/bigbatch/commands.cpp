#include "commands.h"

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/text.h"
#include "dist/launcher.h"
#include "report/files.h"
#include "report/html_report.h"
#include "report/plan_report.h"
#include "runtime/runtime_env.h"
#include "schedule/interval.h"
#include "schedule/lr_schedule.h"
#include "sweep/sweep_grid.h"
#include "sweep/sweep_runner.h"
#include "train/fit_command.h"
#include "train/trainer.h"
#include "train/verify.h"

namespace bigbatch::cli {

namespace {

// Flag values as text, keyed by option name; applied in table order after parsing.
struct FlagValues {
  std::map<std::string, std::string> text;
  std::map<std::string, bool> switches;
  std::map<std::string, CLI::Option*> handles;
};

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

// `skip`: options the command defines otherwise (a sweep takes lists where train takes one).
void register_options(CLI::App& command, unsigned mask, FlagValues& values,
                      const std::set<std::string>& skip = {}) {
  for (const auto& spec : option_table()) {
    if (!(spec.commands & mask) || skip.count(spec.name))
      continue;
    const std::string flag = "--" + spec.name;
    if (spec.is_switch()) {
      values.handles[spec.name] = command.add_flag(flag, values.switches[spec.name], spec.help);
    } else {
      // A flag given twice takes its last value, as in most command lines (and as a flag
      // overriding --config does).
      values.handles[spec.name] =
          command.add_option(flag, values.text[spec.name], spec.help + default_note(spec))
              ->type_name(spec.value_hint)
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
}

void apply_flags(TrainConfig& config, unsigned mask, FlagValues& values) {
  for (const auto& spec : option_table()) {
    if (!(spec.commands & mask) || !values.handles.count(spec.name))
      continue;
    const auto* handle = values.handles.at(spec.name);
    if (handle->count() == 0)
      continue;
    apply_option(config, spec, spec.is_switch() ? "true" : values.text.at(spec.name));
  }
}

int run_plan(TrainConfig config, int64_t dataset_size, int64_t world_size, bool json) {
  const ResolvedRun run = resolve_run(config, dataset_size, world_size);
  if (json) {
    std::cout << plan_json(run).dump(2) << "\n";
  } else {
    std::cout << format_plan_text(run);
  }
  return kExitOk;
}

int run_fit(const TrainConfig& config, bool json) {
  const FitReport report = run_fit(config);
  std::cout << (json ? report.json + "\n" : report.text);
  return report.max_micro_batch > 0 ? kExitOk : kExitOutOfMemory;
}

int run_verify(const TrainConfig& config) {
  // The classic bug on purpose, so verify's own tests can see it caught (never for users).
  const char* broken = std::getenv("BIGBATCH_VERIFY_BREAK_NORMALISATION_FOR_TESTS");
  const VerifyReport report = run_verify(config, broken != nullptr && std::string(broken) == "1");
  std::cout << report.text;
  switch (report.verdict) {
    case VerifyVerdict::Exact:
      return kExitOk;
    case VerifyVerdict::BatchNorm:
      return kExitVerifyBatchNorm;
    case VerifyVerdict::Unexpected:
      return kExitVerifyUnexpected;
  }
  return kExitInternalError;
}

// Options a sweep sets per cell, or for every cell itself.
const std::set<std::string> kSweepOwnOptions = {
    "global-batch", "lr-scaling",  "warmup",      "target-accuracy",  "epochs",
    "out",          "resume",      "progress",    "checkpoint-every", "keep-checkpoints",
    "accum-steps",  "max-updates", "save-weights"};

struct SweepFlags {
  std::string global_batches;
  std::string lr_scalings = "linear";
  std::string warmups = "0u";
  double target_accuracy = 0.9;
  int64_t max_epochs = 20;
  std::string out;
  int64_t jobs = 0;
};

std::string self_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    throw Error(ErrorKind::Io, "cannot find the bigbatch executable to run the cells",
                "run bigbatch by its full path");
  }
  return path.string();
}

int run_sweep_command(TrainConfig base, const SweepFlags& flags) {
  SweepOptions options;
  options.grid.global_batches = parse_batch_list(flags.global_batches);
  options.grid.lr_scalings = parse_word_list(flags.lr_scalings, "--lr-scaling",
                                             [](const std::string& w) { parse_lr_scaling(w); });
  options.grid.warmups =
      parse_word_list(flags.warmups, "--warmup", [](const std::string& w) { Interval::parse(w); });
  if (!(flags.target_accuracy > 0 && flags.target_accuracy <= 1)) {
    throw Error(ErrorKind::Config,
                "--target-accuracy must be a fraction above 0, up to 1, got " +
                    format_double(flags.target_accuracy),
                "e.g. --target-accuracy 0.9");
  }
  if (flags.max_epochs < 1)
    throw Error(ErrorKind::Config, "--max-epochs must be at least 1", "e.g. --max-epochs 20");
  // The rate is tuned at the smallest batch, and scaled from there (the seed's practice).
  if (!base.lr_ref_batch)
    base.lr_ref_batch = options.grid.global_batches.front();
  options.micro_batch = base.micro_batch.value_or(kDefaultMicroBatchSize);
  base.micro_batch.reset();
  base.validate();
  const int64_t cpus = available_cpus();
  options.threads_per_cell = base.threads > 0 ? base.threads : 1;
  options.jobs =
      flags.jobs > 0 ? flags.jobs : std::max<int64_t>(1, cpus / options.threads_per_cell);
  base.threads = options.threads_per_cell;
  options.base_config = render_toml_config(base);
  options.target_accuracy = flags.target_accuracy;
  options.max_epochs = flags.max_epochs;
  if (flags.out.empty()) {
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    options.out = std::string("runs/sweep-") + stamp;
  } else {
    options.out = flags.out;
  }
  options.binary = self_executable();
  std::fprintf(stderr,
               "sweep: %zu cells (%zu global batches x %zu LR rules x %zu warmups), %lld at a "
               "time with %lld thread(s) each, target %s%% in at most %lld epochs, in %s\n",
               options.grid.cells().size(), options.grid.global_batches.size(),
               options.grid.lr_scalings.size(), options.grid.warmups.size(),
               static_cast<long long>(options.jobs),
               static_cast<long long>(options.threads_per_cell),
               format_significant(100 * flags.target_accuracy).c_str(),
               static_cast<long long>(flags.max_epochs), options.out.c_str());
  return run_sweep(options);
}

int run_train(const TrainConfig& config) {
  const TrainResult result = run_training(config);
  if (!result.is_main_rank)
    return kExitOk;
  std::printf("run directory: %s\n", result.run_dir.c_str());
  if (result.updates > 0) {
    std::printf(
        "test accuracy %.2f%% (loss %.4f) after %lld updates, %lld samples; training %s at %s "
        "samples/s, %s in all\n",
        100 * result.test_accuracy, result.test_loss, static_cast<long long>(result.updates),
        static_cast<long long>(result.samples_seen), human_duration(result.train_seconds).c_str(),
        human_count(result.samples_per_s).c_str(), human_duration(result.total_seconds).c_str());
  }
  return kExitOk;
}

// --resume PATH: the run's own config.toml, then --config if given, then the flags; the run
// continues in its directory from its newest checkpoint (or the one named).
TrainConfig resume_config(const std::string& config_path, FlagValues& flags) {
  const std::string checkpoint = find_latest_checkpoint(flags.text.at("resume"));
  const std::string run_dir = run_directory_of_checkpoint(checkpoint);
  TrainConfig config;
  if (path_exists(run_dir + "/config.toml"))
    load_toml_config(config, run_dir + "/config.toml");
  if (!config_path.empty())
    load_toml_config(config, config_path);
  apply_flags(config, kTrainCommand, flags);
  if (flags.handles.at("out")->count() > 0 && config.out != run_dir) {
    throw Error(ErrorKind::Usage,
                "--out cannot move a resumed run (it continues in '" + run_dir + "')",
                "drop --out, or copy the run directory first and resume the copy");
  }
  config.out = run_dir;
  config.resume = checkpoint;
  return config;
}

// CLI11 reports an unknown flag as "The following arguments were not expected: --lrr";
// add the likely intended one.
std::string unknown_flag_hint(int argc, char** argv, const CLI::App& app) {
  std::vector<std::string> known;
  for (const auto* command : app.get_subcommands({})) {
    for (const auto* option : command->get_options()) {
      for (const auto& name : option->get_lnames())
        known.push_back("--" + name);
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0)
      continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) != known.end())
      continue;
    if (const auto guess = closest_match(arg, known))
      return "did you mean " + *guess + "? ";
  }
  return {};
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{
      "bigbatch: train with any effective batch, exactly (micro-batches x accumulation x ranks)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bigbatch 0.1.0");

  CLI::App* plan = app.add_subcommand(
      "plan", "show the batch plan, epoch arithmetic and learning rate for a dataset size");
  FlagValues plan_flags;
  register_options(*plan, kPlanCommand, plan_flags);
  int64_t dataset_size = 60000;
  int64_t world_size = 1;
  bool json = false;
  plan->add_option("--dataset-size", dataset_size,
                   "samples per epoch (default: Fashion-MNIST's 60000)");
  plan->add_option("--world-size", world_size, "data-parallel ranks (default 1)");
  plan->add_flag("--json", json, "print one JSON object instead of text");

  CLI::App* train = app.add_subcommand(
      "train", "train a model; the default job is Fashion-MNIST, cnn, 256 = 32 x 8");
  FlagValues train_flags;
  register_options(*train, kTrainCommand, train_flags);
  std::string config_path;
  train
      ->add_option("--config", config_path,
                   "TOML file whose keys are these flags' names; flags override it")
      ->type_name("FILE");

  CLI::App* fit = app.add_subcommand(
      "fit", "measure the largest and the fastest micro-batch that fit a memory budget");
  FlagValues fit_flags;
  register_options(*fit, kFitCommand, fit_flags);
  bool fit_json = false;
  fit->add_flag("--json", fit_json,
                "print {budget_bytes, max_micro_batch, fastest_micro_batch, table} as JSON");

  CLI::App* verify = app.add_subcommand(
      "verify",
      "check that this configuration's accumulation equals one big batch: gradients and weights "
      "after one update, per tensor (exit 0 exact, 6 BatchNorm, 7 unexpected)");
  FlagValues verify_flags;
  register_options(*verify, kTrainCommand, verify_flags);
  std::string verify_config_path;
  verify->add_option("--config", verify_config_path, "TOML file whose keys are train's flags")
      ->type_name("FILE");

  CLI::App* sweep = app.add_subcommand(
      "sweep",
      "grow the global batch with the learning rate scaled and watch validation accuracy: a grid "
      "of train runs, their updates to a target accuracy, summary.csv/.md and report.html");
  FlagValues sweep_flags;
  register_options(*sweep, kTrainCommand, sweep_flags, kSweepOwnOptions);
  SweepFlags sweep_options;
  sweep
      ->add_option("--global-batch", sweep_options.global_batches,
                   "global batches: 256,1024 or a doubling run 32,64,...,4096")
      ->required()
      ->type_name("LIST");
  sweep
      ->add_option("--lr-scaling", sweep_options.lr_scalings,
                   "LR rules to compare, e.g. none,linear,sqrt (default linear)")
      ->type_name("LIST");
  sweep
      ->add_option("--warmup", sweep_options.warmups, "warmups to compare, e.g. 0u,2e (default 0u)")
      ->type_name("LIST");
  sweep->add_option("--target-accuracy", sweep_options.target_accuracy,
                    "validation accuracy each cell trains to (default 0.9)");
  sweep->add_option("--max-epochs", sweep_options.max_epochs,
                    "a cell stops here if it has not reached the target (default 20)");
  sweep->add_option("--out", sweep_options.out, "sweep directory (default runs/sweep-<timestamp>)")
      ->type_name("DIR");
  sweep->add_option("--jobs", sweep_options.jobs,
                    "cells run at once (default: CPUs / threads per cell)");
  std::string sweep_config_path;
  sweep->add_option("--config", sweep_config_path, "TOML file of train's keys shared by every cell")
      ->type_name("FILE");

  CLI::App* report = app.add_subcommand(
      "report", "write RUN_DIR/report.html: charts of the run (self-contained, no network)");
  std::string report_dir;
  report->add_option("run_dir", report_dir, "a run directory written by bigbatch train")
      ->required()
      ->type_name("RUN_DIR");

  CLI::App* launch = app.add_subcommand("launch",
                                        "start and supervise the local workers of a data-parallel "
                                        "job: launch --nproc N -- COMMAND...");
  LaunchOptions launch_options;
  launch->add_option("--nproc", launch_options.nproc, "workers on this machine")->required();
  launch->add_option("--nnodes", launch_options.nnodes, "machines in the job (default 1)");
  launch->add_option("--node-rank", launch_options.node_rank,
                     "this machine's index, 0 to nnodes - 1 (default 0)");
  launch->add_option("--master-addr", launch_options.master_addr,
                     "rank 0's host (default 127.0.0.1)");
  launch->add_option("--master-port", launch_options.master_port,
                     "rank 0's rendezvous port (default 29500)");
  launch->add_option(
      "--grace-seconds", launch_options.grace_seconds,
      "after a failure, seconds the other workers get to stop before SIGKILL (default 5)");
  launch->footer(
      "The worker command follows --, e.g. bigbatch launch --nproc 4 -- bigbatch train "
      "--global-batch 1024");

  // The worker command after `--` is the launcher's, verbatim: it never reaches CLI11, which
  // would otherwise match its words against bigbatch's own subcommands.
  int parsed_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      parsed_argc = i;
      launch_options.command.assign(argv + i + 1, argv + argc);
      break;
    }
  }

  try {
    app.parse(parsed_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string command = plan->parsed()     ? "plan"
                                : train->parsed()  ? "train"
                                : fit->parsed()    ? "fit"
                                : verify->parsed() ? "verify"
                                : report->parsed() ? "report"
                                : sweep->parsed()  ? "sweep"
                                : launch->parsed() ? "launch"
                                                   : "";
    std::fprintf(stderr, "bigbatch: error[usage]: %s; %ssee 'bigbatch %s--help'\n", e.what(),
                 unknown_flag_hint(argc, argv, app).c_str(),
                 command.empty() ? "" : (command + " ").c_str());
    return kExitBadInput;
  }

  try {
    TrainConfig config;
    if (plan->parsed()) {
      apply_flags(config, kPlanCommand, plan_flags);
      return run_plan(config, dataset_size, world_size, json);
    }
    if (launch->parsed())
      return run_launcher(launch_options);
    if (sweep->parsed()) {
      if (!sweep_config_path.empty())
        load_toml_config(config, sweep_config_path);
      apply_flags(config, kTrainCommand, sweep_flags);
      return run_sweep_command(config, sweep_options);
    }
    if (report->parsed()) {
      std::printf("%s\n", write_run_report(report_dir).c_str());
      return kExitOk;
    }
    if (verify->parsed()) {
      if (!verify_config_path.empty())
        load_toml_config(config, verify_config_path);
      apply_flags(config, kTrainCommand, verify_flags);
      return run_verify(config);
    }
    if (fit->parsed()) {
      apply_flags(config, kFitCommand, fit_flags);
      return run_fit(config, fit_json);
    }
    BB_INTERNAL_ASSERT(train->parsed(), "a subcommand is required");
    if (train_flags.handles.at("resume")->count() > 0) {
      return run_train(resume_config(config_path, train_flags));
    }
    if (!config_path.empty())
      load_toml_config(config, config_path);
    apply_flags(config, kTrainCommand, train_flags);
    return run_train(config);
  } catch (const Interrupted& e) {
    return 128 + e.signal_number();
  } catch (const Error& e) {
    std::fprintf(stderr, "bigbatch: error[%s]: %s\n", to_string(e.kind()), e.what());
    if (e.kind() == ErrorKind::Distributed)
      return kExitDistributed;
    if (e.kind() == ErrorKind::Memory)
      return kExitOutOfMemory;
    return e.kind() == ErrorKind::Diverged ? kExitDiverged : kExitBadInput;
  } catch (const c10::OutOfMemoryError& e) {
    // Outside the micro-steps (which back off): the optimizer step, evaluation, model set-up.
    std::fprintf(stderr, "bigbatch: error[memory]: %s; raise --memory-budget\n",
                 e.what_without_backtrace());
    return kExitOutOfMemory;
  } catch (const std::exception& e) {
    // libtorch's c10::Error messages carry a C++ backtrace; the first line is the message.
    std::string message = e.what();
    message = message.substr(0, message.find('\n'));
    std::fprintf(stderr,
                 "bigbatch: internal error: %s (please report this with the command line)\n",
                 message.c_str());
    return kExitInternalError;
  }
}

}  // namespace bigbatch::cli
