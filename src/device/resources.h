#pragma once
// The machine's resources a command computes with, set before any parallel work or allocation:
// the CPU's intra-op threads and floating-point mode, and the accounting of tensor memory with
// its budget.
//
//   start_memory_accounting(config, device);
//   const bool flushing_denormals = configure_cpu(config, threads);
#include <torch/torch.h>

#include <cstdint>

#include "config/train_config.h"

namespace bigbatch {

// The CPU settings every command that computes starts with, before any parallel work: intra-op
// threads, glibc malloc tuning (runtime/runtime_env.h), and denormal floats flushed to zero
// (x86 FTZ/DAZ) unless --keep-denormals. Denormals (|x| < 1.2e-38 in fp32: softmax
// probabilities of confident predictions, decayed momentum) take ~100x longer per operation on
// x86; measured, an mlp at micro 16 trains 1.8x faster with them flushed and to the same
// loss. The setting is per thread and inherited by threads created afterwards, which is why
// it comes first. Returns whether flushing is in effect.
bool configure_cpu(const TrainConfig& config, int64_t threads);

// Counts every tensor allocation from here on, and enforces --memory-budget on `device` (the
// CPU's tracking allocator, or a GPU's caching allocator).
void start_memory_accounting(const TrainConfig& config, const torch::Device& device);

}  // namespace bigbatch
