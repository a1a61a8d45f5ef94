#include "device/resources.h"

#include "memory/tracking_allocator.h"
#include "runtime/runtime_env.h"

namespace bigbatch {

bool configure_cpu(const TrainConfig& config, int64_t threads) {
  // setFlushDenormal() sets the calling thread's mode and reports whether the CPU has it.
  const bool flush = !config.keep_denormals;
  const bool flushing = at::globalContext().setFlushDenormal(flush) && flush;
  torch::set_num_threads(static_cast<int>(threads));
  // The intra-op pool may predate this call (the BLAS starts it when it loads), and its
  // threads keep their own mode: one chunk per thread sets it on each of them.
  at::parallel_for(0, threads, 1,
                   [flush](int64_t, int64_t) { at::globalContext().setFlushDenormal(flush); });
  tune_malloc();
  return flushing;
}

void start_memory_accounting(const TrainConfig& config, const torch::Device& device) {
  install_tracking_allocator();
  account_memory_on(device);
  set_memory_budget(config.memory_budget);
}

}  // namespace bigbatch
