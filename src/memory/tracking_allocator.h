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
// Host-side data (the dataset in memory, which a GPU run keeps on the host too) is loaded
// inside an UntrackedAllocations scope, so the budget covers what a training step needs:
// weights, gradients, optimizer state, activations and batch buffers.
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

MemoryCounters memory_counters();
// Starts a new peak from the current usage.
void reset_peak_memory();
// Allocations that would take tracked usage above `bytes` throw c10::OutOfMemoryError.
void set_memory_budget(int64_t bytes);

// Allocations made by this thread while an instance lives are not counted (and never refused).
class UntrackedAllocations {
 public:
  UntrackedAllocations();
  ~UntrackedAllocations();
  UntrackedAllocations(const UntrackedAllocations&) = delete;
  UntrackedAllocations& operator=(const UntrackedAllocations&) = delete;
};

}  // namespace bigbatch
