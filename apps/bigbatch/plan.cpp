// `bigbatch plan`: the batch plan, epoch arithmetic and learning rate for a dataset size.
#include <iostream>

#include "commands.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "flags.h"
#include "report/plan_report.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class PlanCommand final : public Subcommand {
 public:
  explicit PlanCommand(CLI::App& parent)
      : Subcommand(parent, "plan",
                   "show the batch plan, epoch arithmetic and learning rate for a dataset size") {
    register_options(app(), kPlanCommand, flags_);
    app().add_option("--dataset-size", dataset_size_,
                     "samples per epoch (default: Fashion-MNIST's 60000)");
    app().add_option("--world-size", world_size_, "data-parallel ranks (default 1)");
    app().add_option("--tokens-per-sample", tokens_per_sample_,
                     "language models: mean target tokens per sample (--seq-len for packed "
                     "blocks; the corpus's mean for documents, which train prints), so that "
                     "the plan shows tokens per update and takes intervals in tokens (4Mt)");
    app().add_flag("--json", json_, "print one JSON object instead of text");
  }

  int run() override {
    TrainConfig config;
    apply_flags(config, kPlanCommand, flags_);
    if (!(tokens_per_sample_ >= 0 && tokens_per_sample_ <= 1e9)) {
      throw Error(ErrorKind::Usage, "--tokens-per-sample must be a positive number of tokens",
                  "e.g. --tokens-per-sample 256 (--seq-len, for packed blocks)");
    }
    const ResolvedRun run = resolve_run(config, dataset_size_, world_size_, tokens_per_sample_);
    if (json_) {
      std::cout << plan_json(run).dump(2) << "\n";
    } else {
      std::cout << format_plan_text(run);
    }
    return kExitOk;
  }

 private:
  FlagValues flags_;
  int64_t dataset_size_ = 60000;
  int64_t world_size_ = 1;
  double tokens_per_sample_ = 0;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Subcommand> make_plan_command(CLI::App& parent) {
  return std::make_unique<PlanCommand>(parent);
}

}  // namespace bigbatch::cli
