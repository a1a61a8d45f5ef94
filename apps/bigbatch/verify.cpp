// `bigbatch verify`: this configuration's accumulation against one big batch, per tensor.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "commands/verify.h"
#include "core/error.h"
#include "flags.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class VerifyCommand final : public Subcommand {
 public:
  explicit VerifyCommand(CLI::App& parent)
      : Subcommand(parent, "verify",
                   "check that this configuration's accumulation equals one big batch: gradients "
                   "and weights after one update, per tensor (exit 0 exact, 6 BatchNorm, 7 "
                   "unexpected)") {
    register_options(app(), kTrainCommand, flags_);
    add_config_option(app(), config_path_, "TOML file whose keys are train's flags");
  }

  int run() override {
    // One update is verified, in memory: flags about the run's length, its outputs and its
    // resumption change nothing here, and are said so (--resume would otherwise seem to verify
    // that run).
    static const char* const kRunOnly[] = {"out",
                                           "resume",
                                           "discard-newer",
                                           "epochs",
                                           "max-updates",
                                           "target",
                                           "target-accuracy",
                                           "checkpoint-every",
                                           "eval-every",
                                           "keep-checkpoints",
                                           "save-weights",
                                           "progress",
                                           "max-bad-updates",
                                           "dist-timeout",
                                           "bucket-mb",
                                           "strict-batch",
                                           "no-noise-scale",
                                           "noise-gradient",
                                           "spike-factor",
                                           "shard-optimizer",
                                           "no-shard-optimizer"};
    for (const char* name : kRunOnly) {
      if (flags_.given(name))
        std::fprintf(stderr, "verify: --%s does not change what is verified (ignored)\n", name);
    }
    if (flags_.given("resume")) {
      throw Error(ErrorKind::Usage,
                  "verify --resume: verify checks a configuration's first update, not a run's",
                  "run 'bigbatch verify --config RUN/config.toml' to verify the run's "
                  "configuration");
    }
    const TrainConfig config = configured(config_path_, kTrainCommand, flags_);
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

 private:
  FlagValues flags_;
  std::string config_path_;
};

}  // namespace

std::unique_ptr<Subcommand> make_verify_command(CLI::App& parent) {
  return std::make_unique<VerifyCommand>(parent);
}

}  // namespace bigbatch::cli
