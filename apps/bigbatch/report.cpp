// `bigbatch report`: RUN_DIR/report.html, rebuilt from the run directory's files; with several
// run directories, one page that overlays them.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "report/compare_report.h"
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
                   "for a sweep's directory, its summaries and report again; for several run "
                   "directories, one page that overlays them (--out)") {
    app()
        .add_option("run_dirs", run_dirs_,
                    "run directories written by bigbatch train (two or more: compared)")
        ->required()
        ->type_name("RUN_DIR...");
    app().add_option("--out", out_,
                     "where the comparison of several runs is written (default compare.html)");
  }

  int run() override {
    if (run_dirs_.size() == 1) {
      if (!out_.empty()) {
        throw Error(ErrorKind::Usage,
                    "--out names the page that compares two or more runs; a single run's "
                    "report is always RUN_DIR/report.html",
                    "drop --out, or give more run directories to compare");
      }
      // A sweep's directory: its summaries and report, rebuilt from its cells.
      if (rewrite_sweep_report(run_dirs_[0]))
        return kExitOk;
      std::vector<std::string> skipped;
      const std::string page = write_run_report(run_dirs_[0], &skipped);
      for (const std::string& line : skipped) {
        std::fprintf(stderr,
                     "report: warning: %s/metrics.jsonl %s; skipped it (restore the file, or "
                     "delete that line)\n",
                     run_dirs_[0].c_str(), line.c_str());
      }
      std::printf("%s\n", page.c_str());
      return kExitOk;
    }
    const std::string out = out_.empty() ? "compare.html" : out_;
    check_output_file(out, "--out", {}, "compare.html");
    write_comparison_report(run_dirs_, out);
    std::printf("%s\n", out.c_str());
    return kExitOk;
  }

 private:
  std::vector<std::string> run_dirs_;
  std::string out_;
};

}  // namespace

std::unique_ptr<Subcommand> make_report_command(CLI::App& parent) {
  return std::make_unique<ReportCommand>(parent);
}

}  // namespace bigbatch::cli
