#include "memory/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
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
  int64_t mapped_bytes;  // > 0: a block of the host cache, this long; 0: from c10::alloc_cpu
};

// Large host blocks (1 MiB and up) come from a cache of mappings, as CUDA's caching allocator
// keeps device blocks. Why (issue 36): a language model's micro-batches take ever-changing
// shapes ([rows, longest] with hundreds of distinct lengths), so every step frees and asks for
// another mix of 1-32 MiB buffers; glibc's heap kept the freed ones as holes that the next mix
// did not fit, and resident memory grew by about a tensor peak every two epochs (heaptrack: the
// live heap flat at ~280 MiB while the heap's footprint went 312 -> 1126 MiB in 6 epochs).
// Here a block is its own mapping, so nothing fragments: a request takes the smallest idle block
// that holds it and is at most twice its size class (resident already, so no page faults), else
// maps a new one rounded up to an eighth of an octave. Whenever the mapped bytes, in use and
// idle, would pass kMappedPerPeak times the peak of the large requests in use (or the memory
// budget, when there is one), the least recently freed idle blocks are unmapped: what stays
// mapped is that limit, or what is in use when nothing idle is left, and a block in use is at
// most 2.25 times its request. Reuse spares the page faults of fresh memory: glibc's own mmap
// threshold at 1 MiB keeps memory as flat but cost ~20% of throughput.
class HostBlockCache {
 public:
  static constexpr size_t kSmallestBlock = size_t(1) << 20;
  static constexpr size_t kLargestBlock = size_t(1) << 48;  // larger: malloc refuses it
  static constexpr size_t kClassesPerOctave = 8;
  static constexpr size_t kLargestReuse = 2;  // an idle block serves requests down to half it
  static constexpr size_t kMappedPerPeak = 2;

  struct Block {
    void* base = nullptr;
    size_t bytes = 0;
  };

  // A block of at least `requested` bytes (>= kSmallestBlock), idle or newly mapped; an empty
  // block when the system has no memory left even after the idle blocks are given back.
  Block take(size_t requested) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t bytes = class_bytes(requested);
    auto best = idle_.end();
    for (auto block = idle_.begin(); block != idle_.end(); ++block) {
      if (block->bytes >= bytes && block->bytes <= kLargestReuse * bytes &&
          (best == idle_.end() || block->bytes < best->bytes))
        best = block;
    }
    Block block;
    if (best != idle_.end()) {
      block = *best;
      idle_bytes_ -= block.bytes;
      idle_.erase(best);
    } else {
      unmap_idle_while_above(mapped_limit(requested), bytes);
      block = {map(bytes), bytes};
      if (block.base == nullptr && !idle_.empty()) {
        unmap_idle_while_above(0, bytes);
        block.base = map(bytes);
      }
      if (block.base == nullptr)
        return {};
      ++mapped_blocks_;
    }
    in_use_bytes_ += block.bytes;
    requested_in_use_ += requested;
    requested_peak_ = std::max(requested_peak_, requested_in_use_);
    return block;
  }

  void give_back(Block block, size_t requested) {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_in_use_ -= requested;
    in_use_bytes_ -= block.bytes;
    idle_.push_front(block);
    idle_bytes_ += block.bytes;
    unmap_idle_while_above(mapped_limit(0), 0);
  }

  // Unmaps every idle block, and starts a new peak from what is in use (a fit probe, an
  // out-of-memory back-off: the sizes before them are not the run's).
  void release_idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    unmap_idle_while_above(0, 0);
    requested_peak_ = requested_in_use_;
  }

  // The host memory budget (0: none): idle blocks never keep the mapped bytes above it.
  void set_budget(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    budget_ = bytes;
  }

  HostBlockCacheCounters counters() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<int64_t>(in_use_bytes_), static_cast<int64_t>(idle_bytes_),
            static_cast<int64_t>(requested_in_use_), static_cast<int64_t>(requested_peak_),
            mapped_blocks_};
  }

 private:
  static size_t class_bytes(size_t bytes) {
    size_t octave = kSmallestBlock;
    while (octave * 2 <= bytes)
      octave *= 2;
    const size_t step = octave / kClassesPerOctave;  // a multiple of any page size up to 128 KiB
    return (bytes + step - 1) / step * step;
  }

  static void* map(size_t bytes) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return base == MAP_FAILED ? nullptr : base;
  }

  // `adding`: a request about to be in use, which counts towards the peak.
  size_t mapped_limit(size_t adding) const {
    const size_t limit = kMappedPerPeak * std::max(requested_peak_, requested_in_use_ + adding);
    return budget_ > 0 ? std::min(limit, budget_) : limit;
  }

  // Unmaps the least recently freed idle blocks while the mapped bytes plus `adding` pass `limit`.
  void unmap_idle_while_above(size_t limit, size_t adding) {
    while (!idle_.empty() && in_use_bytes_ + idle_bytes_ + adding > limit) {
      const Block& oldest = idle_.back();
      ::munmap(oldest.base, oldest.bytes);
      idle_bytes_ -= oldest.bytes;
      idle_.pop_back();
    }
  }

  std::mutex mutex_;
  std::list<Block> idle_;  // the most recently freed first
  size_t idle_bytes_ = 0;
  size_t in_use_bytes_ = 0;
  size_t requested_in_use_ = 0;
  size_t requested_peak_ = 0;
  size_t budget_ = 0;
  int64_t mapped_blocks_ = 0;
};

// Never destroyed: tensors freed during the process's exit still give their blocks back.
HostBlockCache& host_cache() {
  static auto* cache = new HostBlockCache;
  return *cache;
}

// BIGBATCH_HOST_BLOCK_CACHE=0 leaves every block to malloc, for measuring what the cache does
// (bench/lm_memory_bench.py --epochs).
bool host_cache_enabled() {
  static const bool enabled = [] {
    const char* setting = std::getenv("BIGBATCH_HOST_BLOCK_CACHE");
    return setting == nullptr || std::string(setting) != "0";
  }();
  return enabled;
}

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
  if (header.mapped_bytes > 0)
    host_cache().give_back({base, static_cast<size_t>(header.mapped_bytes)},
                           static_cast<size_t>(header.bytes) + kHeaderBytes);
  else
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
    // Blocks of data loaded outside the budget (the dataset) live for the run: malloc's.
    const size_t total = n + kHeaderBytes;
    const bool cached = host_cache_enabled() && counted &&
                        total >= HostBlockCache::kSmallestBlock &&
                        n < HostBlockCache::kLargestBlock;
    size_t mapped = 0;
    void* base = nullptr;
    if (cached) {
      const HostBlockCache::Block block = host_cache().take(total);
      base = block.base;
      mapped = block.bytes;
    } else {
      try {
        base = c10::alloc_cpu(total);
      } catch (const c10::Error&) {
        base = nullptr;
      }
    }
    if (base == nullptr) {
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
    const BlockHeader header{bytes, counted ? 1 : 0, static_cast<int64_t>(mapped)};
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
  host_cache().set_budget(bytes > 0 && !accounting_cuda() ? static_cast<size_t>(bytes) : 0);
  if (accounting_cuda())
    set_cuda_memory_budget(accounted_index(), bytes > 0 ? bytes : 0);
}

void release_cached_memory() {
  host_cache().release_idle();
  if (accounting_cuda())
    release_cuda_cache();
}

HostBlockCacheCounters host_block_cache_counters() {
  return host_cache().counters();
}

UntrackedAllocations::UntrackedAllocations() {
  ++t_untracked_depth;
}

UntrackedAllocations::~UntrackedAllocations() {
  --t_untracked_depth;
}

}  // namespace bigbatch
