// `bigbatch sweep`: a grid of train runs over global batches, LR rules and warmups, each
// trained to a target (an accuracy, bits per byte, a loss), with a summary and a report.
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>

#include "commands.h"
#include "core/error.h"
#include "core/text.h"
#include "device/device_check.h"
#include "flags.h"
#include "runtime/runtime_env.h"
#include "schedule/interval.h"
#include "schedule/lr_schedule.h"
#include "session/session.h"
#include "subcommand.h"
#include "sweep/sweep_grid.h"
#include "sweep/sweep_runner.h"
#include "sweep/sweep_summary.h"
#include "train/run_setup.h"

namespace bigbatch::cli {

namespace {

// Options a sweep sets per cell, or for every cell itself.
const std::set<std::string> kSweepOwnOptions = {
    "global-batch",     "lr-scaling",  "warmup",      "target-accuracy", "target",
    "epochs",           "out",         "resume",      "progress",        "checkpoint-every",
    "keep-checkpoints", "accum-steps", "max-updates", "save-weights"};

std::string self_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    throw Error(ErrorKind::Io, "cannot find the bigbatch executable to run the cells",
                "run bigbatch by its full path");
  }
  return path.string();
}

// Every cell trains on base's data: loaded once here, so that what no cell could do is refused
// in one line before any cell starts (and before the sweep's directory exists). A global batch
// above the training set would train on the whole set per update at a rate scaled for the
// batch it names: train warns and goes on, a sweep comparing batches must not.
void check_cells_against_the_data(TrainConfig base, const StopTarget& target,
                                  const std::vector<int64_t>& global_batches) {
  const DatasetSplits data = load_data_outside_budget(base);
  base.target = target.to_string();
  base.target_accuracy = 0;
  check_watched_metrics(base, data);
  const int64_t samples = data.train.size();
  std::string above;
  int count = 0;
  for (const int64_t batch : global_batches) {
    if (batch > samples) {
      above += (above.empty() ? "" : ", ") + std::to_string(batch);
      ++count;
    }
  }
  if (count > 0) {
    throw Error(ErrorKind::Config,
                "--global-batch " + above + (count > 1 ? " are" : " is") +
                    " larger than the training set (" + std::to_string(samples) +
                    " samples): such a cell would train on the whole set each update, at a rate "
                    "scaled for a batch it never sees",
                "give global batches up to " + std::to_string(samples) +
                    " (or more data: --train-subset, --val-size)");
  }
}

std::string default_sweep_directory() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return std::string("runs/sweep-") + stamp;
}

class SweepCommand final : public Subcommand {
 public:
  explicit SweepCommand(CLI::App& parent)
      : Subcommand(parent, "sweep",
                   "grow the global batch with the learning rate scaled and watch validation "
                   "accuracy: a grid of train runs, their updates to a target (accuracy, bits "
                   "per byte, loss), "
                   "summary.csv/.md and report.html") {
    register_options(app(), kTrainCommand, flags_, kSweepOwnOptions);
    app()
        .add_option("--global-batch", global_batches_,
                    "global batches: 256,1024 or a doubling run 32,64,...,4096")
        ->required()
        ->type_name("LIST");
    app()
        .add_option("--lr-scaling", lr_scalings_,
                    "LR rules to compare, e.g. none,linear,sqrt (default auto, as train's: "
                    "sqrt, linear for lars)")
        ->type_name("LIST");
    app()
        .add_option("--warmup", warmups_, "warmups to compare, e.g. 0u,2e (default 0u)")
        ->type_name("LIST");
    auto* target = app()
                       .add_option("--target", target_,
                                   "what each cell trains to, as train's --target: "
                                   "val_accuracy>=0.9, val_bpb<=1.9, val_loss<=0.3 (default: "
                                   "accuracy 0.9)")
                       ->type_name("METRIC<=X|>=X");
    app()
        .add_option("--target-accuracy", target_accuracy_,
                    "shorthand for --target accuracy>=X: validation accuracy (test without "
                    "one) each cell trains to")
        ->excludes(target);
    app().add_option("--max-epochs", max_epochs_,
                     "a cell stops here if it has not reached the target (default 20)");
    app()
        .add_option("--out", out_, "sweep directory (default runs/sweep-<timestamp>)")
        ->type_name("DIR");
    app().add_option("--jobs", jobs_, "cells run at once (default: CPUs / threads per cell)");
    add_config_option(app(), config_path_, "TOML file of train's keys shared by every cell");
    app().add_flag("--dry-run", dry_run_,
                   "list the cells and the command each would run, and stop (nothing is written)");
  }

  int run() override {
    TrainConfig base = configured(config_path_, kTrainCommand, flags_);

    SweepOptions options;
    options.grid.global_batches = parse_batch_list(global_batches_);
    options.grid.lr_scalings = parse_word_list(
        lr_scalings_, "--lr-scaling", [](const std::string& w) { lr_scaling_names().parse(w); });
    options.grid.warmups =
        parse_word_list(warmups_, "--warmup", [](const std::string& w) { Interval::parse(w); });
    if (!(target_accuracy_ > 0 && target_accuracy_ <= 1)) {
      throw Error(ErrorKind::Config,
                  "--target-accuracy must be a fraction above 0, up to 1, got " +
                      format_double(target_accuracy_),
                  "e.g. --target-accuracy 0.9");
    }
    const StopTarget target =
        target_.empty() ? StopTarget::accuracy(target_accuracy_) : StopTarget::parse(target_);
    if (jobs_ < 0)
      throw Error(ErrorKind::Config, "--jobs must be at least 1, got " + std::to_string(jobs_),
                  "e.g. --jobs 2, or leave it out for CPUs / threads per cell");
    if (max_epochs_ < 1)
      throw Error(ErrorKind::Config, "--max-epochs must be at least 1", "e.g. --max-epochs 20");
    // A rate given is tuned at the smallest batch, and scaled from there (the seed's
    // practice); the default rate at its own batch.
    if (!base.lr_ref_batch)
      base.lr_ref_batch = base.lr_reference(options.grid.global_batches.front());
    options.grid.reference_batch = *base.lr_ref_batch;
    options.micro_batch = base.micro_batch.value_or(kDefaultMicroBatchSize);
    base.micro_batch.reset();
    base.validate();
    // The cells train on base's device: one that cannot work is refused here, in one line,
    // not once per cell after the sweep's directory exists.
    check_device_available(base.device);
    check_cells_against_the_data(base, target, options.grid.global_batches);
    const int64_t cpus = available_cpus();
    options.threads_per_cell = base.threads > 0 ? base.threads : 1;
    options.jobs = jobs_ > 0 ? jobs_ : std::max<int64_t>(1, cpus / options.threads_per_cell);
    base.threads = options.threads_per_cell;
    options.base_config = render_toml_config(base.with_absolute_paths());
    options.target = target;
    options.max_epochs = max_epochs_;
    options.out = out_.empty() ? default_sweep_directory() : out_;
    options.binary = self_executable();
    check_rerun_is_the_same_sweep(options);
    std::fprintf(stderr,
                 "sweep: %zu cells (%zu global batches x %zu LR rules x %zu warmups), %lld at a "
                 "time with %lld thread(s) each, target %s in at most %lld epochs, in %s\n",
                 options.grid.cells().size(), options.grid.global_batches.size(),
                 options.grid.lr_scalings.size(), options.grid.warmups.size(),
                 static_cast<long long>(options.jobs),
                 static_cast<long long>(options.threads_per_cell), target_text(target).c_str(),
                 static_cast<long long>(max_epochs_), options.out.c_str());
    if (dry_run_) {
      const auto cells = options.grid.cells();
      for (size_t i = 0; i < cells.size(); ++i) {
        const SweepCell& cell = cells[i];
        std::printf("%-28s global batch %-6lld micro-batch %-5lld LR rule %-9s warmup %s%s\n",
                    cell.name().c_str(), static_cast<long long>(cell.global_batch),
                    static_cast<long long>(cell.micro_batch(options.micro_batch)),
                    cell.lr_scaling.c_str(), cell.warmup.c_str(),
                    cell.same_as.empty() ? ""
                                         : ("  (the same run as " + cell.same_as +
                                            ": at the reference batch every rule but adascale "
                                            "trains at the base rate)")
                                               .c_str());
      }
      std::string command;
      for (const auto& word :
           sweep_cell_command(options, cells.front(), options.out + "/" + cells.front().name()))
        command += (command.empty() ? "" : " ") + word;
      std::printf(
          "each cell runs, in its own directory (the first shown; base.toml holds the flags all "
          "cells share):\n  %s\n(dry run: nothing was trained or written)\n",
          command.c_str());
      return kExitOk;
    }
    return run_sweep(options);
  }

 private:
  FlagValues flags_;
  std::string config_path_;
  std::string global_batches_;
  std::string lr_scalings_ = "auto";
  std::string warmups_ = "0u";
  double target_accuracy_ = 0.9;
  std::string target_;
  int64_t max_epochs_ = 20;
  std::string out_;
  int64_t jobs_ = 0;
  bool dry_run_ = false;
};

}  // namespace

std::unique_ptr<Subcommand> make_sweep_command(CLI::App& parent) {
  return std::make_unique<SweepCommand>(parent);
}

}  // namespace bigbatch::cli
