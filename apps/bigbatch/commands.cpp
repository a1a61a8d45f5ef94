#include "commands.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "models/models.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

// CLI11 reports an unknown flag as "The following arguments were not expected: --lrr";
// add the likely intended one.
// What other training tools call these settings (Lightning, Hugging Face's Trainer and
// Accelerate, plain scripts), with bigbatch's names for them: a user's first flags are theirs.
struct ForeignFlag {
  const char* name;  // with '-' for '_'
  const char* ours;
};
constexpr ForeignFlag kForeignFlags[] = {
    {"--batch-size",
     "--global-batch N (samples per update) and --micro-batch M (per forward and "
     "backward pass)"},
    {"--per-device-train-batch-size",
     "--micro-batch M (samples per forward and backward pass "
     "on one rank)"},
    {"--train-batch-size", "--global-batch N (samples per update, over every rank)"},
    {"--accumulate-grad-batches", "--accum-steps K (or give --global-batch and --micro-batch)"},
    {"--gradient-accumulation-steps", "--accum-steps K (or give --global-batch and --micro-batch)"},
    {"--grad-accum", "--accum-steps K (or give --global-batch and --micro-batch)"},
    {"--grad-accum-steps", "--accum-steps K (or give --global-batch and --micro-batch)"},
    {"--learning-rate", "--lr"},
    {"--max-steps", "--max-updates"},
    {"--num-epochs", "--epochs"},
    {"--num-train-epochs", "--epochs"},
    {"--warmup-steps", "--warmup Nu (N updates)"},
};

std::string unknown_flag_hint(int argc, char** argv, const CLI::App& app) {
  std::vector<std::string> known;
  for (const auto* command : app.get_subcommands({})) {
    for (const auto* option : command->get_options()) {
      for (const auto& name : option->get_lnames())
        known.push_back("--" + name);
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--")
      break;  // the worker command of `launch` follows: not bigbatch's flags
    if (arg.rfind("--", 0) != 0)
      continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) != known.end())
      continue;
    std::string spelled = arg;
    std::replace(spelled.begin(), spelled.end(), '_', '-');
    for (const ForeignFlag& foreign : kForeignFlags) {
      if (spelled == foreign.name)
        return "bigbatch's name for it is " + std::string(foreign.ours) + "; ";
    }
    if (const auto guess = closest_match(arg, known))
      return "did you mean " + *guess + "? ";
  }
  return {};
}

// CLI11 lists the arguments it did not expect last one first ("cuda --device"): say them in
// the order they were typed.
std::string unexpected_arguments(int argc, char** argv, const CLI::App& app) {
  std::vector<std::string> left;
  for (const auto* command : app.get_subcommands({})) {
    for (const auto& arg : command->remaining())
      left.push_back(arg);
  }
  for (const auto& arg : app.remaining())
    left.push_back(arg);
  std::string ordered;
  for (int i = 1; i < argc && !left.empty(); ++i) {
    const auto at = std::find(left.begin(), left.end(), std::string(argv[i]));
    if (at == left.end())
      continue;
    ordered += (ordered.empty() ? "" : " ") + *at;
    left.erase(at);
  }
  for (const auto& arg : left)  // none expected: whatever CLI11 kept that argv did not show
    ordered += (ordered.empty() ? "" : " ") + arg;
  return "arguments not expected: " + ordered;
}

// Help that fits the terminal: each description word-wrapped beside the flags' column
// (CLI11 2.1 prints it as one line, 43 of train's 62 flags wider than 80 columns).
class WrappingFormatter final : public CLI::Formatter {
 public:
  std::string make_option_desc(const CLI::Option* option) const override {
    const std::string text = CLI::Formatter::make_option_desc(option);
    const size_t room = std::max<size_t>(30, help_width() - get_column_width());
    std::string out;
    size_t line = 0;
    for (const auto& word : split(text, ' ')) {
      if (word.empty())
        continue;
      if (line > 0 && line + 1 + word.size() > room) {
        out += "\n";
        line = 0;
      } else if (line > 0) {
        out += " ";
        ++line;
      }
      out += word;
      line += word.size();
    }
    return out;
  }

 private:
  static size_t help_width() {
    winsize size{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col >= 60)
      return size.ws_col;
    return 80;
  }
};

// The single place where errors become one line on stderr and an exit code (commands.h).
int run_reporting_errors(Subcommand& command) {
  try {
    const int code = command.run();
    // What a command printed is its result: output lost to a full disk or a closed pipe is a
    // failure, not a success.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      const int error = errno;
      std::fprintf(stderr,
                   "bigbatch: error[io]: cannot write standard output: %s; check where it goes "
                   "(a full disk, a closed pipe)\n",
                   std::strerror(error != 0 ? error : EIO));
      return code != 0 ? code : kExitBadInput;
    }
    return code;
  } catch (const Interrupted& e) {
    return 128 + e.signal_number();
  } catch (const Error& e) {
    std::fprintf(stderr, "bigbatch: error[%s]: %s\n", to_string(e.kind()), e.what());
    if (e.kind() == ErrorKind::Distributed)
      return kExitDistributed;
    if (e.kind() == ErrorKind::Memory)
      return kExitOutOfMemory;
    return e.kind() == ErrorKind::Diverged ? kExitDiverged : kExitBadInput;
  } catch (const c10::OutOfMemoryError& e) {
    // Outside the micro-steps (which back off): the optimizer step, evaluation, model set-up.
    const std::string what = e.what_without_backtrace();
    const bool budget = what.find("memory budget exceeded") != std::string::npos;
    std::fprintf(stderr, "bigbatch: error[memory]: %s; %s\n", what.c_str(),
                 budget ? "raise --memory-budget"
                        : "make the model or the micro-batch smaller, or use a machine with more "
                          "memory");
    return kExitOutOfMemory;
  } catch (const std::exception& e) {
    // libtorch's c10::Error messages carry a C++ backtrace; the first line is the message.
    std::string message = e.what();
    message = message.substr(0, message.find('\n'));
    std::fprintf(stderr,
                 "bigbatch: internal error: %s (please report this with the command line)\n",
                 message.c_str());
    return kExitInternalError;
  }
}

// A flag that takes one value, given more than once: the last wins, and is said to.
void warn_about_repeated_flags(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands({})) {
    if (!command->parsed())
      continue;
    for (const CLI::Option* option : command->get_options()) {
      if (option->get_type_size_max() < 1 || option->get_items_expected_max() != 1 ||
          option->count() < 2)
        continue;
      const CLI::results_t& values = option->results();
      std::fprintf(stderr, "bigbatch: warning: %s is given %zu times (%s): the last, %s, is used\n",
                   option->get_name().c_str(), values.size(), join(values, ", ").c_str(),
                   values.back().c_str());
    }
  }
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{
      "bigbatch: train with any effective batch, exactly (micro-batches x accumulation x ranks)"};
  app.require_subcommand(1);
  app.formatter(std::make_shared<WrappingFormatter>());  // before the subcommands inherit it
  // A single-value flag given twice takes its last value, as in most command lines (a script's
  // `$BASE --lr X` overrides), and says so: warn_about_repeated_flags.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", "bigbatch 0.1.0 (" + libtorch_description() + ")");

  // The worker command after `--` is the launcher's, verbatim: it never reaches CLI11, which
  // would otherwise match its words against bigbatch's own subcommands.
  int parsed_argc = argc;
  std::vector<std::string> worker_command;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      parsed_argc = i;
      worker_command.assign(argv + i + 1, argv + argc);
      break;
    }
  }

  std::vector<std::unique_ptr<Subcommand>> commands;
  commands.push_back(make_plan_command(app));
  commands.push_back(make_train_command(app));
  commands.push_back(make_fit_command(app));
  commands.push_back(make_lr_find_command(app));
  commands.push_back(make_verify_command(app));
  commands.push_back(make_sweep_command(app));
  commands.push_back(make_report_command(app));
  commands.push_back(make_sample_command(app));
  commands.push_back(make_evaluate_command(app));
  commands.push_back(make_predict_command(app));
  commands.push_back(make_launch_command(app, worker_command));
  const auto parsed = [&]() -> Subcommand* {
    for (auto& command : commands) {
      if (command->parsed())
        return command.get();
    }
    return nullptr;
  };

  // `bigbatch help [SUBCOMMAND]` is --help; a misspelt subcommand gets the likely one.
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({}))
    names.push_back(sub->get_name());
  const auto unknown_subcommand = [&](const std::string& word) {
    if (std::find(names.begin(), names.end(), word) != names.end())
      return false;
    const auto guess = closest_match(word, names);
    std::fprintf(stderr,
                 "bigbatch: error[usage]: '%s' is not a subcommand; %ssee 'bigbatch --help'\n",
                 word.c_str(), guess ? ("did you mean '" + *guess + "'? ").c_str() : "");
    return true;
  };
  if (parsed_argc >= 2 && std::string(argv[1]) == "help") {
    if (parsed_argc >= 3 && unknown_subcommand(argv[2]))
      return kExitBadInput;
    std::vector<std::string> words = {argv[0]};
    if (parsed_argc >= 3)
      words.push_back(argv[2]);
    words.push_back("--help");
    std::vector<char*> help_argv;
    for (auto& w : words)
      help_argv.push_back(w.data());
    try {
      app.parse(static_cast<int>(help_argv.size()), help_argv.data());
    } catch (const CLI::Error& e) {
      return app.exit(e);
    }
    return kExitOk;
  }
  if (parsed_argc >= 2 && argv[1][0] != '-' && unknown_subcommand(argv[1]))
    return kExitBadInput;
  try {
    app.parse(parsed_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const Subcommand* command = parsed();
    // A flag that is not known gets the likely one; a known flag with a bad value does not.
    const bool unknown = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    const std::string what = unknown ? unexpected_arguments(argc, argv, app) : e.what();
    std::fprintf(stderr, "bigbatch: error[usage]: %s; %ssee 'bigbatch %s--help'\n", what.c_str(),
                 unknown ? unknown_flag_hint(argc, argv, app).c_str() : "",
                 command ? (command->name() + " ").c_str() : "");
    return kExitBadInput;
  }
  Subcommand* command = parsed();
  BB_INTERNAL_ASSERT(command != nullptr, "a subcommand is required");
  warn_about_repeated_flags(app);
  return run_reporting_errors(*command);
}

}  // namespace bigbatch::cli
