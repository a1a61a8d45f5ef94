#pragma once
// The process environment that the numeric libraries read once, when they are loaded —
// before main() runs, so setting it later has no effect:
//  - OpenBLAS 0.3.21 (Debian 12) does not recognise recent Intel server CPUs and falls back
//    to its generic "Prescott" kernels: 23 GFLOP/s instead of ~120 on this machine's GEMM.
//  - GNU OpenMP spins idle threads by default; on a 2-vCPU machine 2 spinning threads are
//    slower than 1 (../shared/PERF_NOTES.md). OMP_WAIT_POLICY=PASSIVE fixes it.
// prepare_runtime_environment() checks both and, when something the user did not set needs
// changing, re-executes the binary once with the corrected environment. A user's own
// OPENBLAS_CORETYPE / OMP_WAIT_POLICY always wins. It also tunes glibc malloc, which can be
// done in-process.
#include <cstdint>
#include <string>

namespace bigbatch {

// Call first thing in main(). May not return (execv) when the environment needs fixing.
void prepare_runtime_environment(char** argv);

// One line describing what was chosen, for the run log: "OpenBLAS core SkylakeX, ...".
std::string runtime_environment_summary();

// CPUs this process may run on (its affinity mask), the default thread count.
int64_t available_cpus();

// The default intra-op thread count: OMP_NUM_THREADS when set (a launcher sharing the machine
// between workers sets it), else available_cpus().
int64_t default_thread_count();
// The intra-op threads to use: `requested`, or default_thread_count() for 0 — never more than
// available_cpus(): more threads than CPUs only wait for each other (OMP_NUM_THREADS=1000 made a
// 0.1 s job take 53 s). A request that is capped is said on stderr.
int64_t resolve_thread_count(int64_t requested);

// The process's resident set: now, and its peak since the start or reset_peak_rss() (Linux's
// VmHWM, read through getrusage where a reset confirmed that it follows the reset), in bytes. What
// the operating system sees, beside the tensor bytes the tracking allocator counts.
int64_t current_rss_bytes();
int64_t peak_rss_bytes();
// Starts a new peak from the current resident set (Linux: /proc/self/clear_refs), so that a
// training peak is not the data loader's transient buffers. Returns false where unsupported.
bool reset_peak_rss();

// Memory the kernel reports as available to new work (MemAvailable), in bytes; 0 if unknown.
int64_t available_memory_bytes();

// Keeps large activation buffers out of mmap/munmap churn (PERF_NOTES: 3.3k -> 5.3k
// samples/s for a CNN at micro 64). Process-wide, idempotent. A threshold the user set
// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES) is left as given.
void tune_malloc();
// Whether the environment sets a malloc parameter: `variable` (MALLOC_MMAP_THRESHOLD_) or the
// GLIBC_TUNABLES entry `tunable` (glibc.malloc.mmap_threshold).
bool malloc_parameter_given(const char* variable, const char* tunable);

}  // namespace bigbatch
