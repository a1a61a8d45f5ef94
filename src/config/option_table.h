#pragma once
// One table defines every training option once: its flag and TOML key (the same name), its
// help text, which commands take it, how to set it from text and how to write it back. The
// CLI registers flags from it, the TOML loader checks keys against it (unknown keys get a
// "did you mean"), and config.toml in each run directory is rendered from it. Adding an
// option means adding one row.
//
//   TrainConfig config;
//   load_toml_config(config, "experiment.toml");          // file first
//   apply_option(config, find_option("lr"), "0.2");       // then flags override
//   atomic_write_file(run_dir + "/config.toml", render_toml_config(config));
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/train_config.h"

namespace bigbatch {

using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                                 std::vector<std::string>>;

enum CommandMask : unsigned { kTrainCommand = 1u, kPlanCommand = 2u, kFitCommand = 4u };

struct OptionSpec {
  std::string name;  // flag --name and TOML key name
  std::string help;
  std::string value_hint;  // e.g. "N", "LR", "INTERVAL"; empty for a boolean switch
  unsigned commands = kTrainCommand;
  std::function<void(TrainConfig&, const std::string&)> set;
  std::function<std::optional<ConfigValue>(const TrainConfig&)> get;  // nullopt: leave unset
  bool is_list = false;  // takes a comma-separated list (a TOML array in a config file)
  // A switch that says the other state of another one (--no-nesterov): config.toml writes the
  // state once, under the other's name.
  bool negates_another = false;

  bool is_switch() const { return value_hint.empty(); }
};

const std::vector<OptionSpec>& option_table();
const OptionSpec& find_option(const std::string& name);

// Sets one option from its text form; errors name the flag and the value.
void apply_option(TrainConfig& config, const OptionSpec& spec, const std::string& text);

// Reads a TOML file whose keys are option names; throws bigbatch::Error (Config) on syntax
// errors (with line and column), unknown keys (with the closest known key) and bad values.
void load_toml_config(TrainConfig& config, const std::string& path);
// The same for TOML text; `path` names it in errors.
void load_toml_config_text(TrainConfig& config, const std::string& text, const std::string& path);

// The fully resolved configuration as TOML, loadable by load_toml_config.
std::string render_toml_config(const TrainConfig& config);

// " --model gpt --dataset text:DIR ...": train's flags whose values differ from the defaults,
// in table order and quoted for the shell, less those named in `leave_out` (for a suggested
// command line that repeats what a user gave).
std::string flags_set_in(const TrainConfig& config, const std::vector<std::string>& leave_out = {});

}  // namespace bigbatch
