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
#include "train/trainer.h"

namespace bigbatch::cli {

namespace {

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
    if (result.updates > 0 && result.language_model) {
      const std::string bits =
          result.val_has_bits_per_byte
              ? ", " + format_fixed(result.val_bits_per_byte, 4) + " bits per byte"
              : std::string();  // token files: the bytes are not known
      std::printf(
          "held-out loss %.4f per token%s, after %lld updates, %lld samples "
          "(%lld tokens); training %s at %s tokens/s, %s in all\n",
          result.val_loss, bits.c_str(), static_cast<long long>(result.updates),
          static_cast<long long>(result.samples_seen), static_cast<long long>(result.items_seen),
          human_duration(result.train_seconds).c_str(),
          human_count(double(result.items_seen) / std::max(1e-9, result.train_seconds)).c_str(),
          human_duration(result.total_seconds).c_str());
    } else if (result.updates > 0 && result.is_regression) {
      std::printf(
          "test RMSE %.4g (loss %.4g: squared error per sample) after %lld updates, %lld "
          "samples; training %s at %s samples/s, %s in all\n",
          result.test_rmse, result.test_loss, static_cast<long long>(result.updates),
          static_cast<long long>(result.samples_seen), human_duration(result.train_seconds).c_str(),
          human_count(result.samples_per_s).c_str(), human_duration(result.total_seconds).c_str());
    } else if (result.updates > 0 && !result.has_accuracy) {
      std::printf(
          "test loss %s per item after %lld updates, %lld samples (%lld items); "
          "training %s at %s samples/s, %s in all\n",
          format_loss(result.test_loss).c_str(), static_cast<long long>(result.updates),
          static_cast<long long>(result.samples_seen), static_cast<long long>(result.items_seen),
          human_duration(result.train_seconds).c_str(), human_count(result.samples_per_s).c_str(),
          human_duration(result.total_seconds).c_str());
    } else if (result.updates > 0) {
      std::printf(
          "test accuracy %.2f%% (loss %s) after %lld updates, %lld samples; training %s at "
          "%s samples/s, %s in all\n",
          100 * result.test_accuracy, format_loss(result.test_loss).c_str(),
          static_cast<long long>(result.updates), static_cast<long long>(result.samples_seen),
          human_duration(result.train_seconds).c_str(), human_count(result.samples_per_s).c_str(),
          human_duration(result.total_seconds).c_str());
    }
    return kExitOk;
  }

 private:
  // --resume PATH: the run's own config.toml, then --config if given, then the flags; the run
  // continues in its directory from its newest checkpoint (or the one named).
  TrainConfig resume_config() const {
    if (flags_.given("init-weights")) {
      // The checkpoint's weights are where the run stands; others would be silently ignored.
      throw Error(ErrorKind::Usage, "--init-weights cannot be given with --resume",
                  "drop --init-weights to continue the run, or start a new run from those weights");
    }
    const std::string checkpoint = find_latest_checkpoint(flags_.text.at("resume"));
    const std::string run_dir = run_directory_of_checkpoint(checkpoint);
    TrainConfig config;
    if (path_exists(run_dir + "/config.toml")) {
      load_toml_config(config, run_dir + "/config.toml");
      config.complete_older_run();  // the images as the run normalised them
    }
    if (!config_path_.empty())
      load_toml_config(config, config_path_);
    apply_flags(config, kTrainCommand, flags_);
    if (flags_.given("out") && config.out != run_dir) {
      throw Error(ErrorKind::Usage,
                  "--out cannot move a resumed run (it continues in '" + run_dir + "')",
                  "drop --out, or copy the run directory first and resume the copy");
    }
    config.out = run_dir;
    config.resume = checkpoint;
    return config;
  }

  FlagValues flags_;
  std::string config_path_;
};

}  // namespace

std::unique_ptr<Subcommand> make_train_command(CLI::App& parent) {
  return std::make_unique<TrainCommand>(parent);
}

}  // namespace bigbatch::cli
