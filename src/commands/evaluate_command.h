#pragma once
// `bigbatch evaluate`: a trained model's loss and its task's metrics on a split of a dataset,
// as text and as JSON, so a run can be used without writing code. The model comes from a run
// directory (its config.toml rebuilds it, its weights.safetensors — or --weights — fill it) or
// from a weights file alone (a built-in image model: the file's metadata names it). The
// dataset is the run's unless --dataset names another of the same shape. Torch-free, for the CLI.
//
//   EvaluateOptions options;
//   options.source = "runs/a";  options.split = "test";
//   EvaluateReport report = run_evaluate(options);   // report.text, report.json
#include <string>

namespace bigbatch {

struct EvaluateOptions {
  std::string source;          // RUN_DIR, or a .safetensors file
  std::string weights;         // other weights for the run's model (default: the run's own)
  std::string dataset;         // another dataset (default: the run's)
  std::string split = "test";  // test, val or train
  std::string device = "cpu";  // --device (config/device_choice.h); not the run's own
};

struct EvaluateReport {
  std::string text;
  std::string json;
};

EvaluateReport run_evaluate(const EvaluateOptions& options);

// `bigbatch predict`: class probabilities (or logits) of an image classifier for the inputs of
// an .npy file, written as an .npy file [N, classes] of float32. uint8 images are prepared as
// the run's training images were (an IDX-trained run's normalisation included); float inputs
// are taken as they are.
struct PredictOptions {
  std::string source;  // RUN_DIR, or a .safetensors file
  std::string weights;
  std::string input;   // x.npy
  std::string output;  // predictions.npy
  bool logits = false;
  std::string device = "cpu";
};

// Returns the line that says what was written.
std::string run_predict(const PredictOptions& options);

}  // namespace bigbatch
