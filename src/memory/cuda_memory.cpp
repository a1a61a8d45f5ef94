#include "memory/cuda_memory.h"

#include <algorithm>

#include "core/error.h"

#ifdef BIGBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace bigbatch {

#ifdef BIGBATCH_WITH_CUDA

namespace {

namespace caching = c10::cuda::CUDACachingAllocator;

c10::DeviceIndex device_index(int64_t index) {
  return static_cast<c10::DeviceIndex>(index);
}

void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw Error(ErrorKind::Config, std::string(call) + " failed: " + cudaGetErrorString(status),
                "check the GPU with nvidia-smi, or run with --device cpu");
  }
}

// The statistics' first entry is the aggregate over the small and large pools (StatType
// AGGREGATE = 0 in libtorch 1.13 and 2.x alike; the enum's namespace moved in 2.x).
constexpr size_t kAggregate = 0;

}  // namespace

bool cuda_memory_supported() {
  return true;
}

MemoryCounters cuda_memory_counters(int64_t index) {
  const auto stats = caching::getDeviceStats(device_index(index));
  MemoryCounters counters;
  counters.current_bytes = stats.allocated_bytes[kAggregate].current;
  counters.peak_bytes = stats.allocated_bytes[kAggregate].peak;
  counters.refused_allocations = stats.num_ooms;
  return counters;
}

void reset_cuda_peak_memory(int64_t index) {
  caching::resetPeakStats(device_index(index));
}

void set_cuda_memory_budget(int64_t index, int64_t bytes) {
  const CudaDeviceInfo info = cuda_device_info(index);
  const double fraction = bytes > 0 ? std::min(1.0, double(bytes) / double(info.total_bytes)) : 1.0;
  caching::setMemoryFraction(fraction, device_index(index));
}

void release_cuda_cache() {
  caching::emptyCache();
}

CudaDeviceInfo cuda_device_info(int64_t index) {
  CudaDeviceInfo info;
  c10::cuda::CUDAGuard guard(device_index(index));
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, static_cast<int>(index)),
             "cudaGetDeviceProperties");
  info.name = properties.name;
  size_t free = 0;
  size_t total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  info.total_bytes = static_cast<int64_t>(total);
  info.free_bytes = static_cast<int64_t>(free);
  const auto stats = caching::getDeviceStats(device_index(index));
  info.cached_bytes =
      stats.reserved_bytes[kAggregate].current - stats.allocated_bytes[kAggregate].current;
  return info;
}

#else  // a CPU-only libtorch

namespace {
[[noreturn]] void no_cuda() {
  internal_assert_fail("cuda_memory_supported()", __FILE__, __LINE__,
                       "CUDA memory asked of a build without CUDA");
}
}  // namespace

bool cuda_memory_supported() {
  return false;
}
MemoryCounters cuda_memory_counters(int64_t) {
  no_cuda();
}
void reset_cuda_peak_memory(int64_t) {
  no_cuda();
}
void set_cuda_memory_budget(int64_t, int64_t) {
  no_cuda();
}
void release_cuda_cache() {}
CudaDeviceInfo cuda_device_info(int64_t) {
  no_cuda();
}

#endif

}  // namespace bigbatch
