#pragma once
// Memory as a measured, enforceable budget (issue: memory as a budget).
//
// On CPU, libtorch has no allocator statistics, so bigbatch installs its own CPU allocator:
// every tensor allocation passes through it, which counts current and peak bytes and refuses an
// allocation that would pass the budget with libtorch's own c10::OutOfMemoryError — the error a
// CUDA build raises when the device is full, so one code path handles both (and tests can
// exercise the out-of-memory path on CPU). On CUDA builds the caching allocator's statistics
// are read instead (compiled only where libtorch has CUDA).
//
//   install_tracking_allocator();          // once, before the model is built
//   set_memory_budget(512 << 20);          // 0: no budget
//   reset_peak_memory();
//   ... a training window ...
//   MemoryCounters m = memory_counters();  // m.peak_bytes: the window's peak
//
// A run on a GPU accounts that device instead (account_memory_on): the counters, the peak and
// the budget then speak of the CUDA caching allocator (memory/cuda_memory.h), whose refusal is
// the same c10::OutOfMemoryError, so the fit, --micro-batch auto and the back-off are one
// code path on every device.
//
// Host-side data (the dataset in memory, which a GPU run keeps on the host too) is loaded
// inside an UntrackedAllocations scope, so the budget covers what a training step needs:
// weights, gradients, optimizer state, activations and batch buffers.
#include <c10/core/Device.h>

#include <cstdint>

namespace bigbatch {

struct MemoryCounters {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;    // since install or the last reset_peak_memory()
  int64_t budget_bytes = 0;  // 0: none
  // Allocations refused by the budget so far. Code that catches errors of its own around
  // allocations (the TorchScript interpreter rewraps c10::OutOfMemoryError as a plain runtime
  // error) tells an out-of-memory from other failures by this count.
  int64_t refused_allocations = 0;
};

// Makes the tracking allocator libtorch's CPU allocator. Idempotent; tensors allocated before
// keep their own deleters, so nothing is miscounted.
void install_tracking_allocator();
bool tracking_allocator_installed();

// The device whose memory memory_counters(), reset_peak_memory() and set_memory_budget()
// speak of: the CPU (the default) or a CUDA device. Set once, when a command knows its device,
// before its budget.
void account_memory_on(c10::Device device);
c10::Device accounted_memory_device();

MemoryCounters memory_counters();
// Starts a new peak from the current usage.
void reset_peak_memory();
// Allocations that would take tracked usage above `bytes` throw c10::OutOfMemoryError (on a
// GPU: memory held by the caching allocator, which includes its cache); 0: no budget.
void set_memory_budget(int64_t bytes);
// Gives cached, unused memory back: the host's idle large blocks and a GPU's caching allocator.
void release_cached_memory();

// The host's cache of large blocks (1 MiB and up), which keeps resident memory flat under
// ever-changing batch shapes (tracking_allocator.cpp says why and how): while idle blocks remain,
// the mapped bytes (in use + idle) stay within twice the peak of the large requests in use, and
// within the memory budget when there is one.
struct HostBlockCacheCounters {
  int64_t in_use_bytes = 0;  // blocks handed out, at their mapped size
  int64_t idle_bytes = 0;    // blocks kept for reuse
  int64_t requested_in_use_bytes = 0;
  int64_t requested_peak_bytes = 0;  // since the start or the last release_cached_memory()
  int64_t mapped_blocks = 0;         // blocks mapped so far (a reuse maps none)
};
HostBlockCacheCounters host_block_cache_counters();

// Allocations made by this thread while an instance lives are not counted (and never refused).
class UntrackedAllocations {
 public:
  UntrackedAllocations();
  ~UntrackedAllocations();
  UntrackedAllocations(const UntrackedAllocations&) = delete;
  UntrackedAllocations& operator=(const UntrackedAllocations&) = delete;
};

}  // namespace bigbatch
