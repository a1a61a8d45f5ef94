// `bigbatch evaluate`: a trained model's loss and metrics on a split of a dataset; `bigbatch
// predict`: its class probabilities for new inputs.
#include <cstdio>

#include "commands.h"
#include "commands/evaluate_command.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class EvaluateCommand final : public Subcommand {
 public:
  explicit EvaluateCommand(CLI::App& parent)
      : Subcommand(parent, "evaluate",
                   "a trained model's loss and metrics on a dataset: RUN_DIR or WEIGHTS") {
    app()
        .add_option("source", options_.source,
                    "a run directory, or a .safetensors file of a built-in image model")
        ->required()
        ->type_name("RUN_DIR|WEIGHTS");
    app().add_option("--weights", options_.weights,
                     "other weights for the run's model (default: RUN_DIR/weights.safetensors)");
    app().add_option("--dataset", options_.dataset,
                     "evaluate on this dataset instead of the run's (same sample shape)");
    app().add_option("--split", options_.split, "test (default), val or train");
    app().add_option(
        "--device", options_.device,
        "cpu (default), cuda, cuda:N or auto: where the model computes (not the run's own device)");
    app().add_flag("--json", json_, "print the result as JSON");
  }

  int run() override {
    const EvaluateReport report = run_evaluate(options_);
    const std::string& out = json_ ? report.json : report.text;
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  }

 private:
  EvaluateOptions options_;
  bool json_ = false;
};

class PredictCommand final : public Subcommand {
 public:
  explicit PredictCommand(CLI::App& parent)
      : Subcommand(parent, "predict",
                   "class probabilities of a trained classifier: RUN_DIR --input X.npy "
                   "--output Y.npy") {
    app()
        .add_option("source", options_.source,
                    "a run directory, or a .safetensors file of a built-in image model")
        ->required()
        ->type_name("RUN_DIR|WEIGHTS");
    app().add_option("--weights", options_.weights, "other weights for the run's model");
    app()
        .add_option("--input", options_.input,
                    "an .npy array of inputs shaped like the training samples: [N, H, W], "
                    "[N, C, H, W] or [N, features]; uint8 images are prepared as in training")
        ->required();
    app()
        .add_option("--output", options_.output,
                    "the .npy file to write: [N, classes] float32, or a regression's values "
                    "shaped like its y")
        ->required();
    app().add_flag("--logits", options_.logits, "write logits instead of probabilities");
    app().add_option(
        "--device", options_.device,
        "cpu (default), cuda, cuda:N or auto: where the model computes (not the run's own device)");
  }

  int run() override {
    std::fputs(run_predict(options_).c_str(), stderr);
    return kExitOk;
  }

 private:
  PredictOptions options_;
};

}  // namespace

std::unique_ptr<Subcommand> make_evaluate_command(CLI::App& parent) {
  return std::make_unique<EvaluateCommand>(parent);
}

std::unique_ptr<Subcommand> make_predict_command(CLI::App& parent) {
  return std::make_unique<PredictCommand>(parent);
}

}  // namespace bigbatch::cli
