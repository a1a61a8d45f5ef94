#pragma once
// One subcommand of the bigbatch command line: it registers its flags on the parent app when
// made, and runs once the command line has parsed. Each lives in its own file (plan.cpp,
// train.cpp, ...); commands.cpp registers them all, parses, and turns errors into exit codes.
//
//   std::unique_ptr<Subcommand> plan = make_plan_command(app);
//   app.parse(argc, argv);
//   if (plan->parsed()) return plan->run();
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

namespace bigbatch::cli {

class Subcommand {
 public:
  Subcommand(CLI::App& parent, const std::string& name, const std::string& description)
      : app_(parent.add_subcommand(name, description)) {}
  virtual ~Subcommand() = default;
  Subcommand(const Subcommand&) = delete;
  Subcommand& operator=(const Subcommand&) = delete;

  bool parsed() const { return app_->parsed(); }
  std::string name() const { return app_->get_name(); }
  // Runs the parsed command; returns the process's exit code (errors are thrown).
  virtual int run() = 0;

 protected:
  CLI::App& app() { return *app_; }

 private:
  CLI::App* app_;
};

std::unique_ptr<Subcommand> make_plan_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_train_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_fit_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_lr_find_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_verify_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_sweep_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_report_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_sample_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_evaluate_command(CLI::App& parent);
std::unique_ptr<Subcommand> make_predict_command(CLI::App& parent);
// `worker_command`: the words after `--`, which the launcher runs verbatim.
std::unique_ptr<Subcommand> make_launch_command(CLI::App& parent,
                                                const std::vector<std::string>& worker_command);

}  // namespace bigbatch::cli
