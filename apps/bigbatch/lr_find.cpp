// `bigbatch lr-find`: the learning-rate range test at the run's effective batch.
#include <iostream>

#include "commands.h"
#include "commands/lr_find_command.h"
#include "flags.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class LrFindCommand final : public Subcommand {
 public:
  explicit LrFindCommand(CLI::App& parent)
      : Subcommand(parent, "lr-find",
                   "the learning-rate range test: a short run at the configured global batch "
                   "whose rate rises exponentially, and the --lr it suggests") {
    register_options(app(), kTrainCommand, flags_);
    add_config_option(app(), config_path_,
                      "TOML file whose keys are train's flags; flags override it");
    app().add_option("--lr-min", options_.lr_min, "the rate of the first update (default 1e-6)");
    app().add_option("--lr-max", options_.lr_max, "the rate of the last update (default 1)");
    app().add_option("--updates", options_.updates, "updates the rate rises over (default 100)");
    app().add_flag("--json", json_,
                   "print lr_find.json: {suggested_lr, rule, lowest_loss_lr, diverged, ...}");
  }

  int run() override {
    const LrFindReport report =
        run_lr_find(configured(config_path_, kTrainCommand, flags_), with_given(options_));
    std::cout << (json_ ? report.json + "\n" : report.text);
    return kExitOk;
  }

 private:
  // The options with the flags given on the command line named: those the test owns are refused
  // at any value.
  LrFindOptions with_given(LrFindOptions options) const {
    for (const auto& [name, handle] : flags_.handles) {
      if (flags_.given(name))
        options.given.push_back(name);
    }
    return options;
  }

  FlagValues flags_;
  std::string config_path_;
  LrFindOptions options_;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Subcommand> make_lr_find_command(CLI::App& parent) {
  return std::make_unique<LrFindCommand>(parent);
}

}  // namespace bigbatch::cli
