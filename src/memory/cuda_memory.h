#pragma once
// A CUDA device's memory, as its caching allocator accounts it: current and peak bytes held by
// tensors, the allocator's refusals, a budget enforced as the allocator's memory fraction, and
// the card's free and total memory. Compiled for real only where libtorch has CUDA
// (BIGBATCH_WITH_CUDA); elsewhere cuda_memory_supported() is false and the rest is never
// called (device/device.h refuses --device cuda first). memory_counters() and the budget in
// tracking_allocator.h read these when the accounted device is a GPU.
#include <cstdint>
#include <string>

#include "memory/tracking_allocator.h"

namespace bigbatch {

// Whether this build's libtorch has CUDA.
bool cuda_memory_supported();

// Allocated bytes (current, peak since the last reset) and out-of-memory refusals of `index`.
MemoryCounters cuda_memory_counters(int64_t index);
void reset_cuda_peak_memory(int64_t index);
// Allocations that would take the memory the allocator holds on `index` above `bytes` throw
// c10::OutOfMemoryError (the allocator's memory fraction); 0 lifts the limit.
void set_cuda_memory_budget(int64_t index, int64_t bytes);
// Returns the allocator's cached, unused blocks to the card (after an out-of-memory error, and
// between the fit's probes, so each starts from what is really in use).
void release_cuda_cache();

struct CudaDeviceInfo {
  std::string name;          // "NVIDIA H200"
  int64_t total_bytes = 0;   // the card's memory
  int64_t free_bytes = 0;    // free now, as the driver reports it
  int64_t cached_bytes = 0;  // held by this process's caching allocator (reusable by it)
};
CudaDeviceInfo cuda_device_info(int64_t index);

}  // namespace bigbatch
