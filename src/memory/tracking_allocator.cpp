#include "memory/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "core/text.h"
#include "memory/cuda_memory.h"

namespace bigbatch {

namespace {

// Each block starts with a header holding its size and whether it was counted. Its length is
// c10's alignment, so the data that follows keeps the alignment vectorised kernels expect.
constexpr size_t kHeaderBytes = 64;
static_assert(kHeaderBytes >= c10::gAlignment && kHeaderBytes % c10::gAlignment == 0,
              "the header must preserve c10's alignment");

struct BlockHeader {
  int64_t bytes;
  int64_t counted;
};

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_budget{0};
std::atomic<int64_t> g_refused{0};
thread_local int t_untracked_depth = 0;

// The device the counters and the budget speak of (account_memory_on).
std::atomic<int> g_accounted_type{static_cast<int>(c10::DeviceType::CPU)};
std::atomic<int> g_accounted_index{-1};

bool accounting_cuda() {
  return g_accounted_type.load(std::memory_order_relaxed) ==
         static_cast<int>(c10::DeviceType::CUDA);
}

int64_t accounted_index() {
  return std::max(0, g_accounted_index.load(std::memory_order_relaxed));
}

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Takes `bytes` from the budget, or throws without taking anything.
void charge(int64_t bytes) {
  const int64_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  // A GPU run's budget is the device's (cuda_memory.h); host memory stays unbudgeted.
  const int64_t budget = accounting_cuda() ? 0 : g_budget.load(std::memory_order_relaxed);
  if (budget > 0 && now > budget) {
    g_current.fetch_sub(bytes, std::memory_order_relaxed);
    g_refused.fetch_add(1, std::memory_order_relaxed);
    C10_THROW_ERROR(OutOfMemoryError,
                    "memory budget exceeded: allocating " + human_bytes(double(bytes)) + " with " +
                        human_bytes(double(now - bytes)) + " in use would pass the budget of " +
                        human_bytes(double(budget)));
  }
  raise_peak(now);
}

void release_block(void* data) {
  if (data == nullptr)
    return;
  void* base = static_cast<char*>(data) - kHeaderBytes;
  BlockHeader header;
  std::memcpy(&header, base, sizeof header);
  if (header.counted)
    g_current.fetch_sub(header.bytes, std::memory_order_relaxed);
  c10::free_cpu(base);
}

// oneDNN allocates through raw_allocate(), which requires the DataPtr's context to be its data
// pointer and a raw_deleter(): both hold here (../shared/LIBTORCH_NOTES.md).
// libtorch 2.3 made allocate() non-const, and 2.2 added copy_data().
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define BIGBATCH_ALLOCATE_CONST
#else
#define BIGBATCH_ALLOCATE_CONST const
#endif
class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) BIGBATCH_ALLOCATE_CONST override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0)
      return {nullptr, nullptr, &release_block, cpu};
    const bool counted = t_untracked_depth == 0;
    const auto bytes = static_cast<int64_t>(n);
    if (counted)
      charge(bytes);
    void* base = nullptr;
    try {
      base = c10::alloc_cpu(n + kHeaderBytes);
    } catch (const c10::Error&) {
      // The system's refusal, told like the budget's: an out-of-memory error that names the
      // size (training backs off from it), not the allocator's internal enforce message.
      if (counted)
        g_current.fetch_sub(bytes, std::memory_order_relaxed);
      g_refused.fetch_add(1, std::memory_order_relaxed);
      C10_THROW_ERROR(OutOfMemoryError,
                      "this machine could not give " + human_bytes(double(bytes)) + " with " +
                          human_bytes(double(g_current.load(std::memory_order_relaxed))) +
                          " in use");
    }
    const BlockHeader header{bytes, counted ? 1 : 0};
    std::memcpy(base, &header, sizeof header);
    void* data = static_cast<char*>(base) + kHeaderBytes;
    return {data, data, &release_block, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release_block; }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
};
#undef BIGBATCH_ALLOCATE_CONST

std::once_flag g_install_once;
std::atomic<bool> g_installed{false};

}  // namespace

void install_tracking_allocator() {
  std::call_once(g_install_once, [] {
    static TrackingAllocator allocator;  // libtorch keeps the pointer for the process's life
    // Priority above the default allocator's, so a later default registration cannot undo it.
    c10::SetCPUAllocator(&allocator, /*priority=*/10);
    g_installed = true;
  });
}

bool tracking_allocator_installed() {
  return g_installed;
}

void account_memory_on(c10::Device device) {
  g_accounted_type.store(static_cast<int>(device.type()), std::memory_order_relaxed);
  g_accounted_index.store(device.has_index() ? device.index() : 0, std::memory_order_relaxed);
}

c10::Device accounted_memory_device() {
  if (accounting_cuda())
    return {c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(accounted_index())};
  return c10::Device(c10::DeviceType::CPU);
}

MemoryCounters memory_counters() {
  if (accounting_cuda()) {
    MemoryCounters counters = cuda_memory_counters(accounted_index());
    counters.budget_bytes = g_budget.load(std::memory_order_relaxed);
    return counters;
  }
  MemoryCounters counters;
  counters.current_bytes = g_current.load(std::memory_order_relaxed);
  counters.peak_bytes = g_peak.load(std::memory_order_relaxed);
  counters.budget_bytes = g_budget.load(std::memory_order_relaxed);
  counters.refused_allocations = g_refused.load(std::memory_order_relaxed);
  return counters;
}

void reset_peak_memory() {
  if (accounting_cuda()) {
    reset_cuda_peak_memory(accounted_index());
    return;
  }
  g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void set_memory_budget(int64_t bytes) {
  g_budget.store(bytes > 0 ? bytes : 0, std::memory_order_relaxed);
  if (accounting_cuda())
    set_cuda_memory_budget(accounted_index(), bytes > 0 ? bytes : 0);
}

void release_cached_memory() {
  if (accounting_cuda())
    release_cuda_cache();
}

UntrackedAllocations::UntrackedAllocations() {
  ++t_untracked_depth;
}

UntrackedAllocations::~UntrackedAllocations() {
  --t_untracked_depth;
}

}  // namespace bigbatch
