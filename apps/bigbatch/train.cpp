// `bigbatch train`: a run from flags (and --config), or one continued with --resume.
#include <algorithm>
#include <cstdio>

#include "checkpoint/checkpoint_paths.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "flags.h"
#include "subcommand.h"
#include "train/run_directory.h"
#include "train/trainer.h"

namespace bigbatch::cli {

namespace {

// The run's time: its training (the whole run's, resumed or not) and its rate, and what this
// process took. "training 21s at 2.3k samples/s, 25s in all"; resumed: "training 21s over the
// run at 2.3k samples/s (8s in this process, 9s in all)".
std::string time_summary(const TrainResult& result) {
  const bool tokens = result.language_model;
  const double rate = tokens ? double(result.items_seen) / std::max(1e-9, result.train_seconds)
                             : result.samples_per_s;
  const std::string speed = human_count(rate) + (tokens ? " tokens/s" : " samples/s");
  if (result.earlier_train_seconds > 0) {
    return "training " + human_duration(result.train_seconds) + " over the run at " + speed + " (" +
           human_duration(result.train_seconds - result.earlier_train_seconds) +
           " in this process, " + human_duration(result.total_seconds) + " in all)";
  }
  return "training " + human_duration(result.train_seconds) + " at " + speed + ", " +
         human_duration(result.total_seconds) + " in all";
}

// The last line of a run: its held-out figure, how far it trained, how long it took.
std::string final_summary(const TrainResult& result) {
  const std::string trained = " after " + count_of(result.updates, "update") + ", " +
                              count_of(result.samples_seen, "sample");
  if (result.nothing_left_to_train) {  // killed after its last checkpoint, before its end
    const std::string figures = result.recorded_figures.empty()
                                    ? ""
                                    : " (" + result.recorded_figures + " when last evaluated)";
    return "nothing left to train" + trained + figures +
           "; wrote the run's end: weights.safetensors and its report";
  }
  if (result.language_model) {
    const std::string bits =
        result.val_has_bits_per_byte
            ? ", " + format_fixed(result.val_bits_per_byte, 4) + " bits per byte"
            : std::string();  // token files: the bytes are not known
    return "held-out loss " + format_fixed(result.val_loss, 4) + " per token" + bits + "," +
           trained + " (" + count_of(result.items_seen, "token") + "); " + time_summary(result);
  }
  if (!result.tested) {  // no test split
    return std::string("no test split evaluated") + trained + "; " + time_summary(result);
  }
  if (result.is_regression) {
    return "test RMSE " + format_significant(result.test_rmse, 4) + " (loss " +
           format_significant(result.test_loss, 4) + ": squared error per sample)" + trained +
           "; " + time_summary(result);
  }
  if (!result.has_accuracy) {
    return "test loss " + format_loss(result.test_loss) + " per item" + trained + " (" +
           count_of(result.items_seen, "item") + "); " + time_summary(result);
  }
  return "test accuracy " + format_fixed(100 * result.test_accuracy, 2) + "% (loss " +
         format_loss(result.test_loss) + ")" + trained + "; " + time_summary(result);
}

class TrainCommand final : public Subcommand {
 public:
  explicit TrainCommand(CLI::App& parent)
      : Subcommand(parent, "train",
                   "train a model; the default job is Fashion-MNIST, cnn, 256 = 32 x 8") {
    register_options(app(), kTrainCommand, flags_);
    add_config_option(app(), config_path_,
                      "TOML file whose keys are these flags' names; flags override it");
  }

  int run() override {
    const TrainResult result = run_training(
        flags_.given("resume") ? resume_config() : configured(config_path_, kTrainCommand, flags_));
    if (!result.is_main_rank)
      return kExitOk;
    std::printf("run directory: %s\n", result.run_dir.c_str());
    if (result.updates > 0)
      std::printf("%s\n", final_summary(result).c_str());
    return kExitOk;
  }

 private:
  // --resume PATH: the run's own config.toml, then --config if given, then the flags; the run
  // continues in its directory from its newest checkpoint (or the one named).
  TrainConfig resume_config() const {
    return resume_configuration(
        flags_.text.at("resume"),
        [&](TrainConfig& config) {
          if (!config_path_.empty())
            load_toml_config(config, config_path_);
          apply_flags(config, kTrainCommand, flags_);
        },
        flags_.given("init-weights"), flags_.given("out"));
  }

  FlagValues flags_;
  std::string config_path_;
};

}  // namespace

std::unique_ptr<Subcommand> make_train_command(CLI::App& parent) {
  return std::make_unique<TrainCommand>(parent);
}

}  // namespace bigbatch::cli
