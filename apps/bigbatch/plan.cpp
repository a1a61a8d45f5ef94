// `bigbatch plan`: the batch plan, epoch arithmetic and learning rate of a run, before it runs.
// It takes train's flags and --config, loads the configured dataset for its size (or takes
// --dataset-size), and resolves exactly what `bigbatch train` would (config/resolved_run.h).
#include <cstdio>
#include <iostream>
#include <optional>

#include "commands.h"
#include "commands/plan_command.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/text.h"
#include "flags.h"
#include "report/plan_report.h"
#include "session/session.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class PlanCommand final : public Subcommand {
 public:
  explicit PlanCommand(CLI::App& parent)
      : Subcommand(parent, "plan",
                   "show the batch plan, epoch arithmetic and learning rate a train command "
                   "would run") {
    // Every train flag, so a train command line plans as it is; those that cannot change the
    // plan are said to be ignored.
    register_options(app(), kTrainCommand | kPlanCommand, flags_);
    add_config_option(app(), config_path_,
                      "TOML file of train's keys (a run's config.toml too): plan what "
                      "'train --config FILE' would run");
    app().add_option_function<std::string>(
        "--dataset-size",
        [this](const std::string& text) {
          // A whole count: 1e20 or 6e4 would otherwise be a conversion error in CLI11's words.
          const auto value = parse_int(text);
          if (!value || *value < 0) {
            throw CLI::ValidationError("--dataset-size",
                                       "must be a whole number of samples from 0 to "
                                       "9223372036854775807 (e.g. 60000), got '" +
                                           text + "'");
          }
          dataset_size_ = *value;
        },
        "samples per epoch, instead of loading the dataset to count them");
    app().add_option("--world-size", world_size_, "data-parallel ranks (default 1)");
    app().add_option("--tokens-per-sample", tokens_per_sample_,
                     "with --dataset-size, for a language model: mean target tokens per sample "
                     "(--seq-len for packed blocks), so the plan shows tokens per update and "
                     "takes intervals in tokens (4Mt); measured when the dataset is loaded");
    app().add_flag("--json", json_, "print one JSON object instead of text");
  }

  int run() override {
    if (flags_.given("resume")) {
      throw Error(ErrorKind::Usage, "plan --resume: a run's plan is its config.toml's",
                  "run 'bigbatch plan --config RUN/config.toml' (the run's own plan.txt says the "
                  "same)");
    }
    const bool sized = dataset_size_ > 0 || app().get_option("--dataset-size")->count() > 0;
    // The plan computes nothing: no device, no CPU settings; the data only when its size is not
    // given.
    SessionRequest request;
    request.device = SessionDevice::None;
    request.cpu = SessionCpu::Untouched;
    request.data = sized ? SessionData::None : SessionData::Load;
    request.check_before_data = [&](const TrainConfig&, const JobPlace&) {
      for (const auto& spec : option_table()) {
        if (!(spec.commands & kPlanCommand) && flags_.given(spec.name))
          std::fprintf(stderr, "plan: --%s does not change the plan (ignored)\n",
                       spec.name.c_str());
      }
      if (!(tokens_per_sample_ >= 0 && tokens_per_sample_ <= 1e9)) {
        throw Error(ErrorKind::Usage, "--tokens-per-sample must be a positive number of tokens",
                    "e.g. --tokens-per-sample 256 (--seq-len, for packed blocks)");
      }
      if (tokens_per_sample_ > 0 && !sized) {
        throw Error(ErrorKind::Usage,
                    "--tokens-per-sample goes with --dataset-size: a loaded dataset's tokens are "
                    "counted",
                    "drop --tokens-per-sample, or give --dataset-size too");
      }
    };
    const Session session =
        open_session(configured(config_path_, kTrainCommand | kPlanCommand, flags_), request);
    const ResolvedRun run =
        plan_session(session, sized, dataset_size_, tokens_per_sample_, world_size_);
    if (!sized) {
      const DatasetSplits& data = session.data;
      std::fprintf(stderr, "plan: %s: %lld training samples%s%s\n", session.config.dataset.c_str(),
                   static_cast<long long>(data.train.size()), data.description.empty() ? "" : "; ",
                   data.description.c_str());
      for (const std::string& warning : data.warnings)
        std::fprintf(stderr, "plan: warning: %s\n", warning.c_str());
    }
    if (json_) {
      std::cout << plan_session_json(session, sized, run).dump(2) << "\n";
    } else {
      std::cout << format_plan_text(run);
    }
    return kExitOk;
  }

 private:
  FlagValues flags_;
  std::string config_path_;
  int64_t dataset_size_ = 0;
  int64_t world_size_ = 1;
  double tokens_per_sample_ = 0;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Subcommand> make_plan_command(CLI::App& parent) {
  return std::make_unique<PlanCommand>(parent);
}

}  // namespace bigbatch::cli
