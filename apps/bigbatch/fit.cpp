// `bigbatch fit`: the largest and the fastest micro-batch that fit a memory budget.
#include <iostream>

#include "commands.h"
#include "commands/fit_command.h"
#include "flags.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class FitCommand final : public Subcommand {
 public:
  explicit FitCommand(CLI::App& parent)
      : Subcommand(parent, "fit",
                   "measure the largest and the fastest micro-batch that fit a memory budget") {
    register_options(app(), kFitCommand, flags_);
    app().add_option("--world-size", world_size_,
                     "data-parallel ranks the run will have: the search stops at a rank's share "
                     "of the global batch (default 1)");
    app().add_flag("--json", json_,
                   "print {budget_bytes, max_micro_batch, fastest_micro_batch, table} as JSON");
  }

  int run() override {
    TrainConfig config;
    apply_flags(config, kFitCommand, flags_);
    const FitReport report = run_fit(config, world_size_);
    std::cout << (json_ ? report.json + "\n" : report.text);
    return report.max_micro_batch > 0 ? kExitOk : kExitOutOfMemory;
  }

 private:
  FlagValues flags_;
  bool json_ = false;
  int64_t world_size_ = 1;
};

}  // namespace

std::unique_ptr<Subcommand> make_fit_command(CLI::App& parent) {
  return std::make_unique<FitCommand>(parent);
}

}  // namespace bigbatch::cli
