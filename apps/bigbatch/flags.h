#pragma once
// The training options' flags, registered on a subcommand from the option table
// (config/option_table.h) and applied to a TrainConfig after parsing, in table order.
//
//   FlagValues flags;
//   register_options(*command, kTrainCommand, flags);
//   ... app.parse(argc, argv) ...
//   apply_flags(config, kTrainCommand, flags);
#include <CLI/CLI.hpp>
#include <map>
#include <set>
#include <string>

#include "config/option_table.h"
#include "config/train_config.h"

namespace bigbatch::cli {

// Flag values as text, keyed by option name; applied in table order after parsing.
struct FlagValues {
  std::map<std::string, std::string> text;
  std::map<std::string, bool> switches;
  std::map<std::string, CLI::Option*> handles;

  bool given(const std::string& name) const {
    const auto it = handles.find(name);
    return it != handles.end() && it->second->count() > 0;
  }
};

// `skip`: options the command defines otherwise (a sweep takes lists where train takes one).
void register_options(CLI::App& command, unsigned mask, FlagValues& values,
                      const std::set<std::string>& skip = {});

void apply_flags(TrainConfig& config, unsigned mask, const FlagValues& values);

// The defaults, then the TOML file at `config_path` (if not empty), then the flags given.
TrainConfig configured(const std::string& config_path, unsigned mask, const FlagValues& values);

// "--config FILE": a TOML file whose keys are the flags' names.
CLI::Option* add_config_option(CLI::App& command, std::string& path, const std::string& help);

}  // namespace bigbatch::cli
