#include "commands/fit_command.h"

#include <torch/torch.h>

#include <algorithm>

#include "config/option_table.h"
#include "core/error.h"
#include "core/text.h"
#include "device/device.h"
#include "runtime/runtime_env.h"
#include "train/run_setup.h"

namespace bigbatch {

FitReport run_fit(const TrainConfig& config) {
  config.validate();
  const torch::Device device = resolve_device(config.device, /*local_rank=*/0, /*world_size=*/1);
  // A GPU's budget is its memory (free now); a CPU shares its memory with everything else.
  if (config.memory_budget == 0 && !device.is_cuda()) {
    throw Error(ErrorKind::Usage, "bigbatch fit needs the budget to fit in",
                "give --memory-budget SIZE, e.g. bigbatch fit --model " + config.model +
                    " --memory-budget 512MiB");
  }
  start_memory_accounting(config, device);
  configure_cpu(config, resolve_thread_count(config.threads));
  const DatasetSplits data = load_data_outside_budget(config);
  torch::manual_seed(config.seed);
  // Far past any size worth a single pass on one device, and a bound on the search's time.
  constexpr int64_t kLargestProbe = 65536;
  const FitResult fit = measure_micro_batch_fit(
      config, data.train, std::min<int64_t>(kLargestProbe, data.train.size()), /*quiet=*/false);
  FitReport report;
  report.max_micro_batch = fit.max_micro_batch;
  report.json = fit.to_json().dump(2);
  report.text = config.model + " with " + to_string(config.optimizer) + " on " +
                describe_device(device) + ", budget " + human_bytes(double(fit.budget_bytes)) +
                " (usable " + human_bytes(double(fit.usable_bytes)) + " after the " +
                format_double(100 * config.fit_margin) + "% margin), " +
                std::to_string(torch::get_num_threads()) + " thread(s)\n";
  if (fit.probe_row_tokens > 0) {
    report.text += "each size probed at the longest rows (" + std::to_string(fit.probe_row_tokens) +
                   " target tokens, the widest micro-batch a window can hold)\n";
  }
  report.text += fit.to_text();
  if (fit.max_micro_batch == 0) {
    report.text += "not even a micro-batch of 1 fits: raise --memory-budget\n";
  } else {
    const std::string given =
        flags_set_in(config, {"global-batch", "micro-batch", "accum-steps", "micro-batch-tokens",
                              "memory-budget", "fit-margin", "out", "progress"});
    report.text += "largest fitting micro-batch: " + std::to_string(fit.max_micro_batch) +
                   "\nfastest fitting micro-batch: " + std::to_string(fit.fastest_micro_batch);
    if (config.micro_batch_tokens > 0 && fit.probe_row_tokens > 0) {
      // Micro-batches cut by tokens: the fitting rows of the longest length, as a token bound.
      report.text += "\ntrain with it: bigbatch train" + given +
                     " --global-batch G --micro-batch-tokens " +
                     std::to_string(fit.fastest_micro_batch * fit.probe_row_tokens) + " (" +
                     std::to_string(fit.fastest_micro_batch) + " of the longest rows, " +
                     std::to_string(fit.probe_row_tokens) + " tokens each)\n";
    } else {
      report.text += "\ntrain with it: bigbatch train" + given +
                     " --global-batch G --micro-batch " + std::to_string(fit.fastest_micro_batch) +
                     " (or --micro-batch auto --memory-budget " +
                     exact_byte_size(fit.budget_bytes) + ")\n";
    }
  }
  return report;
}

}  // namespace bigbatch
