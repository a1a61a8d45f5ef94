// `bigbatch report`: RUN_DIR/report.html, rebuilt from the run directory's files.
#include <cstdio>

#include "commands.h"
#include "report/html_report.h"
#include "subcommand.h"
#include "sweep/sweep_runner.h"

namespace bigbatch::cli {

namespace {

class ReportCommand final : public Subcommand {
 public:
  explicit ReportCommand(CLI::App& parent)
      : Subcommand(parent, "report",
                   "write RUN_DIR/report.html: charts of the run (self-contained, no network); "
                   "for a sweep's directory, its summaries and report again") {
    app()
        .add_option("run_dir", run_dir_, "a run directory written by bigbatch train")
        ->required()
        ->type_name("RUN_DIR");
  }

  int run() override {
    // A sweep's directory: its summaries and report, rebuilt from its cells.
    if (rewrite_sweep_report(run_dir_))
      return kExitOk;
    std::printf("%s\n", write_run_report(run_dir_).c_str());
    return kExitOk;
  }

 private:
  std::string run_dir_;
};

}  // namespace

std::unique_ptr<Subcommand> make_report_command(CLI::App& parent) {
  return std::make_unique<ReportCommand>(parent);
}

}  // namespace bigbatch::cli
