#pragma once
// What train says when a run starts, as lines of text: the job (model, data, ranks, device, CPU
// settings), the data's warnings, the batch plan, the batch regime with its rate, the
// evaluations. Torch-free: the set-up (train/training_run.h) gathers the facts, this says them.
//
//   RunStart start(config, resolved);
//   start.train_samples = data.train.size();  ...
//   for (const std::string& line : run_start_lines(start)) console.say(line);
#include <cstdint>
#include <string>
#include <vector>

#include "config/resolved_run.h"
#include "config/train_config.h"

namespace bigbatch {

struct RunStart {
  RunStart(const TrainConfig& config_in, const ResolvedRun& run_in)
      : config(config_in), run(run_in) {}
  const TrainConfig& config;  // as resolved
  const ResolvedRun& run;
  int64_t train_samples = 0;
  int64_t validation_samples = 0;
  int64_t test_samples = 0;
  int64_t controller_samples = 0;  // set aside for the automatic batch's tests
  int64_t world_size = 1;
  std::string ranks_source;  // who started the ranks (torchrun, bigbatch launch, ...)
  std::string device;        // described: "cpu", "cuda:0 (NVIDIA H200, 139 GiB)"
  std::string cpu;           // threads, allocator and floating-point settings
  std::string data_description;
  std::vector<std::string> class_warnings;  // labels training cannot learn from
  std::vector<std::string> data_warnings;
};

std::vector<std::string> run_start_lines(const RunStart& start);

}  // namespace bigbatch
