#pragma once
// `bigbatch train`: the three loop levels in order — set-up (train/training_run.h), the fit
// loop (train/fit_loop.h) and its train steps (train/train_step.h) — then the final weights
// and report. The header is torch-free so the CLI compiles without libtorch's headers.
//
//   TrainConfig config;  config.model = "mlp";  config.global_batch = 1024;
//   TrainResult result = run_training(config);
//   // result.run_dir holds config.toml, plan.txt, metrics.jsonl, weights.safetensors
#include <cstdint>
#include <string>

#include "config/train_config.h"

namespace bigbatch {

struct TrainResult {
  std::string run_dir;
  bool is_main_rank = true;  // only rank 0 writes the run directory and evaluates
  int64_t updates = 0;
  int64_t samples_seen = 0;
  int64_t items_seen = 0;  // tokens, for a language model
  bool language_model = false;
  double test_loss = 0;
  double test_accuracy = 0;
  bool tested = false;  // a test split was evaluated (there is one, and the run reached its end)
  bool has_accuracy = true;  // false for a module with its own loss, and for a regression
  bool is_regression = false;
  bool already_finished = false;  // a resumed run that had nothing left: nothing was changed
  // A resume that found no update left to train but the run's end not written (a kill after its
  // last checkpoint): it wrote the weights, and its figures are the run's last recorded
  // evaluation ("test accuracy 30.95%, test loss 1.986"; empty when none was recorded).
  bool nothing_left_to_train = false;
  std::string recorded_figures;
  double test_rmse = 0;  // regression
  // The held-out split's last evaluation (language models: text corpora have no test split).
  double val_loss = 0;
  double val_bits_per_byte = 0;
  bool val_has_bits_per_byte = false;  // text whose bytes are known (not token files)
  double train_seconds = 0;            // the training loop, evaluation excluded (whole run)
  // A resumed run's training time before this process (0 for a fresh run): train_seconds less
  // this is this process's share.
  double earlier_train_seconds = 0;
  double total_seconds = 0;  // everything, data loading included
  double samples_per_s = 0;  // training samples over train_seconds
};

struct CustomProblem;  // train/custom_problem.h

// `problem`: a C++ program's own model and data (bigbatch as a library), or null.
TrainResult run_training(const TrainConfig& config, const CustomProblem* problem = nullptr);

}  // namespace bigbatch
