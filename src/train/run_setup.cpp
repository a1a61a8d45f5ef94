#include "train/run_setup.h"

#include <cstdio>

#include "core/error.h"
#include "memory/tracking_allocator.h"
#include "runtime/runtime_env.h"
#include "train/optimizer.h"

namespace bigbatch {

ModelSpec model_spec(const TrainConfig& config, const TensorDataset& data) {
  ModelSpec spec;
  spec.name = config.model;
  spec.hidden = config.hidden;
  spec.channels = data.inputs.size(1);
  spec.height = data.inputs.size(2);
  spec.width = data.inputs.size(3);
  return spec;
}

DatasetSplits load_data_outside_budget(const TrainConfig& config) {
  UntrackedAllocations host_data;
  return load_idx_dataset(config.dataset_directory(), config.train_subset, config.val_size);
}

void start_memory_accounting(const TrainConfig& config) {
  install_tracking_allocator();
  set_memory_budget(config.memory_budget);
}

FitResult measure_micro_batch_fit(const TrainConfig& config, const TensorDataset& data,
                                  int64_t max_micro_batch, bool quiet) {
  FitOptions options;
  options.budget_bytes = config.memory_budget > 0 ? config.memory_budget : available_memory_bytes();
  if (options.budget_bytes <= 0) {
    throw Error(ErrorKind::Memory, "the available memory could not be read",
                "give the budget with --memory-budget SIZE");
  }
  options.margin = config.fit_margin;
  options.max_micro_batch = max_micro_batch;
  if (!quiet) {
    options.on_probe = [](int64_t micro, bool fits) {
      std::fprintf(stderr, "fit: micro-batch %lld %s\n", static_cast<long long>(micro),
                   fits ? "fits" : "does not fit");
    };
  }
  const ModelSpec spec = model_spec(config, data);
  return fit_micro_batch([&] { return make_model(spec); }, OptimizerSettings::from(config), data,
                         options);
}

}  // namespace bigbatch
