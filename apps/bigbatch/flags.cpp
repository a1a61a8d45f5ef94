#include "flags.h"

#include <type_traits>
#include <variant>

#include "core/text.h"

namespace bigbatch::cli {

namespace {

// "(default: 0.05)", from a default-constructed TrainConfig, so help never drifts from code.
std::string default_note(const OptionSpec& spec) {
  const auto value = spec.get(TrainConfig{});
  if (!value || spec.is_switch())
    return {};
  const std::string text = std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, double>) {
          return format_double(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(v);
        } else {
          std::vector<std::string> parts;
          for (const auto& element : v) {
            if constexpr (std::is_same_v<std::decay_t<decltype(element)>, std::string>) {
              parts.push_back(element);
            } else {
              parts.push_back(std::to_string(element));
            }
          }
          return join(parts, ",");
        }
      },
      *value);
  return text.empty() ? std::string() : " (default: " + text + ")";
}

}  // namespace

void register_options(CLI::App& command, unsigned mask, FlagValues& values,
                      const std::set<std::string>& skip) {
  for (const auto& spec : option_table()) {
    if (!(spec.commands & mask) || skip.count(spec.name))
      continue;
    const std::string flag = "--" + spec.name;
    if (spec.is_switch()) {
      values.handles[spec.name] = command.add_flag(flag, values.switches[spec.name], spec.help);
    } else {
      // A flag given twice takes its last value, as in most command lines (and as a flag
      // overriding --config does).
      values.handles[spec.name] =
          command.add_option(flag, values.text[spec.name], spec.help + default_note(spec))
              ->type_name(spec.value_hint)
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
}

void apply_flags(TrainConfig& config, unsigned mask, const FlagValues& values) {
  for (const auto& spec : option_table()) {
    if (!(spec.commands & mask) || !values.given(spec.name))
      continue;
    apply_option(config, spec, spec.is_switch() ? "true" : values.text.at(spec.name));
  }
}

TrainConfig configured(const std::string& config_path, unsigned mask, const FlagValues& values) {
  TrainConfig config;
  if (!config_path.empty())
    load_toml_config(config, config_path);
  apply_flags(config, mask, values);
  return config;
}

CLI::Option* add_config_option(CLI::App& command, std::string& path, const std::string& help) {
  return command.add_option("--config", path, help)->type_name("FILE");
}

}  // namespace bigbatch::cli
