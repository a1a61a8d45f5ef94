// `bigbatch plan`: the batch plan, epoch arithmetic and learning rate for a dataset size.
#include <iostream>

#include "commands.h"
#include "config/resolved_run.h"
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
    app().add_flag("--json", json_, "print one JSON object instead of text");
  }

  int run() override {
    TrainConfig config;
    apply_flags(config, kPlanCommand, flags_);
    const ResolvedRun run = resolve_run(config, dataset_size_, world_size_);
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
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Subcommand> make_plan_command(CLI::App& parent) {
  return std::make_unique<PlanCommand>(parent);
}

}  // namespace bigbatch::cli
