#include "runtime/runtime_env.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bigbatch {

namespace {
constexpr const char* kReadyMarker = "BIGBATCH_RUNTIME_READY";

const char* openblas_core_name() {
  using CoreNameFn = char* (*)();
  // Looked up at run time: bigbatch does not link OpenBLAS itself, libtorch's BLAS may be
  // another library, and then there is nothing to fix.
  void* symbol = ::dlsym(RTLD_DEFAULT, "openblas_get_corename");
  if (!symbol)
    return nullptr;
  CoreNameFn fn;
  std::memcpy(&fn, &symbol, sizeof fn);
  return fn();
}

// OpenBLAS's generic fallbacks: the cores it picks when it does not know the CPU.
bool is_generic_core(const char* name) {
  for (const char* generic : {"Prescott", "Core2", "Nehalem", "Penryn", "Dunnington", "Katmai",
                              "Coppermine", "Northwood", "Banias", "Atom"}) {
    if (std::strcmp(name, generic) == 0)
      return true;
  }
  return false;
}

const char* better_core_for_this_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2"))
    return "Haswell";
#endif
  return nullptr;
}
}  // namespace

void prepare_runtime_environment(char** argv) {
  if (std::getenv(kReadyMarker))
    return;
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY")) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    changed = true;
  }
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const char* core = openblas_core_name();
    const char* better = better_core_for_this_cpu();
    if (core && better && is_generic_core(core)) {
      ::setenv("OPENBLAS_CORETYPE", better, 1);
      changed = true;
    }
  }
  ::setenv(kReadyMarker, "1", 1);
  if (changed) {
    ::execv("/proc/self/exe", argv);
    // Not fatal: the run is only slower. Fall through with the environment as it was.
  }
}

std::string runtime_environment_summary() {
  const char* core = openblas_core_name();
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  std::string summary =
      std::string("BLAS ") + (core ? std::string("OpenBLAS core ") + core : "not OpenBLAS");
  summary += ", OMP_WAIT_POLICY=" + std::string(wait ? wait : "(unset)");
  return summary;
}

int64_t available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
}

int64_t default_thread_count() {
  if (const char* text = std::getenv("OMP_NUM_THREADS")) {
    const long value = std::strtol(text, nullptr, 10);
    if (value > 0)
      return value;
  }
  return available_cpus();
}

int64_t resolve_thread_count(int64_t requested) {
  const int64_t wanted = requested > 0 ? requested : default_thread_count();
  const int64_t cpus = available_cpus();
  if (wanted <= cpus)
    return wanted;
  std::fprintf(stderr, "warning: %lld threads (%s) capped at the %lld CPUs this process may use\n",
               static_cast<long long>(wanted), requested > 0 ? "--threads" : "OMP_NUM_THREADS",
               static_cast<long long>(cpus));
  return cpus;
}

namespace {
// A "Name:   1234 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t proc_status_bytes(const char* name) {
  std::FILE* file = std::fopen("/proc/self/status", "r");
  if (file == nullptr)
    return -1;
  char line[256];
  int64_t bytes = -1;
  const size_t length = std::strlen(name);
  while (std::fgets(line, sizeof line, file) != nullptr) {
    long long kib = 0;
    if (std::strncmp(line, name, length) == 0 && line[length] == ':' &&
        std::sscanf(line + length + 1, "%lld", &kib) == 1) {
      bytes = static_cast<int64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(file);
  return bytes;
}
}  // namespace

int64_t current_rss_bytes() {
  return std::max<int64_t>(0, proc_status_bytes("VmRSS"));
}

namespace {
int64_t rusage_peak_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return -1;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// getrusage's peak is the larger of the address space's high-water mark (VmHWM, which
// reset_peak_rss() resets) and the marks that exited threads and the image before an exec
// left behind (bigbatch re-executes itself at start-up). Where none of those is above the
// reset mark, the two agree from then on, and the peak costs a system call (0.3 us) instead
// of a /proc read (25-35 us in a process as large as a training run: 3% of an update at
// micro-batch 16, measured). Set by each reset that confirms it; until then, /proc.
std::atomic<bool> g_rusage_follows_high_water{false};
// Per-thread RSS counters reach the shared ones in batches: readings taken a moment apart may
// differ by this much without either being stale.
constexpr int64_t kRssCounterSlackBytes = int64_t{1} << 20;
}  // namespace

int64_t peak_rss_bytes() {
  if (g_rusage_follows_high_water.load(std::memory_order_relaxed)) {
    const int64_t peak = rusage_peak_bytes();
    if (peak >= 0)
      return peak;
  }
  const int64_t high_water = proc_status_bytes("VmHWM");
  if (high_water >= 0)
    return high_water;
  return std::max<int64_t>(0, rusage_peak_bytes());
}

bool reset_peak_rss() {
  std::FILE* file = std::fopen("/proc/self/clear_refs", "w");
  if (file == nullptr)
    return false;
  const bool written = std::fputs("5", file) >= 0;
  const bool reset = std::fclose(file) == 0 && written;
  const int64_t high_water = proc_status_bytes("VmHWM");
  const int64_t usage_peak = rusage_peak_bytes();
  g_rusage_follows_high_water.store(reset && high_water >= 0 && usage_peak >= 0 &&
                                        usage_peak <= high_water + kRssCounterSlackBytes,
                                    std::memory_order_relaxed);
  return reset;
}

int64_t available_memory_bytes() {
  std::FILE* file = std::fopen("/proc/meminfo", "r");
  if (file == nullptr)
    return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, file) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
      break;
  }
  std::fclose(file);
  return static_cast<int64_t>(kib) * 1024;
}

bool malloc_parameter_given(const char* variable, const char* tunable) {
  if (std::getenv(variable) != nullptr)
    return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, tunable) != nullptr;
}

void tune_malloc() {
  // What the user set wins. Tensors of 1 MiB and more do not reach malloc (the tracking
  // allocator's host block cache keeps them, which is what keeps resident memory flat under
  // ever-changing batch shapes, issue 36); these thresholds serve the rest.
  if (!malloc_parameter_given("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"))
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  if (!malloc_parameter_given("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"))
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace bigbatch
