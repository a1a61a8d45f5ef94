// `bigbatch sample`: text drawn from a trained language-model run.
#include <cstdio>

#include "commands.h"
#include "commands/sample.h"
#include "core/text.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class SampleCommand final : public Subcommand {
 public:
  explicit SampleCommand(CLI::App& parent)
      : Subcommand(parent, "sample",
                   "draw text from a trained language-model run: RUN_DIR --prompt TEXT") {
    app()
        .add_option("run_dir", options_.run_dir, "a run directory trained with --model gpt")
        ->required()
        ->type_name("RUN_DIR");
    app().add_option("--prompt", options_.prompt, "text the sample continues (default: none)");
    app().add_option("--tokens", options_.tokens, "tokens (bytes) to draw at most (default 200)");
    app().add_option("--temperature", options_.temperature,
                     "softmax temperature: lower is surer, higher more varied (default 0.8)");
    app().add_option("--top-k", options_.top_k,
                     "draw among the K most likely tokens only (default 0: all)");
    app().add_option_function<std::string>(
        "--seed",
        [this](const std::string& text) {
          // As train's --seed: 0 to 2^63 - 1, never a negative number wrapped round.
          const auto value = parse_int(text);
          if (!value || *value < 0) {
            throw CLI::ValidationError(
                "--seed", "must be an integer from 0 to 9223372036854775807, got '" + text + "'");
          }
          options_.seed = static_cast<uint64_t>(*value);
        },
        "the draw's seed: the same seed, the same text (default 42)");
    app().add_option("--device", options_.device,
                     "cpu (default), cuda, cuda:N or auto: where the model computes (the draws, "
                     "on the CPU, give the same text on any device)");
  }

  int run() override {
    const SampleResult result = sample_text(options_);
    std::fwrite(result.text.data(), 1, result.text.size(), stdout);
    std::fputc('\n', stdout);
    std::fprintf(stderr, "sample: %lld tokens drawn%s\n", static_cast<long long>(result.drawn),
                 result.ended ? ", the last one end-of-text" : "");
    return kExitOk;
  }

 private:
  SampleOptions options_;
};

}  // namespace

std::unique_ptr<Subcommand> make_sample_command(CLI::App& parent) {
  return std::make_unique<SampleCommand>(parent);
}

}  // namespace bigbatch::cli
