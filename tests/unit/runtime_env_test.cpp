#include "runtime/runtime_env.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace bigbatch {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Touches every page of `bytes` fresh bytes, so they count in the resident set.
std::unique_ptr<char[]> resident_block(int64_t bytes) {
  auto block = std::make_unique<char[]>(static_cast<size_t>(bytes));
  std::memset(block.get(), 1, static_cast<size_t>(bytes));
  return block;
}

TEST(MallocTuningTest, AThresholdTheUserSetIsLeftAsGiven) {
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::unsetenv("GLIBC_TUNABLES");
  EXPECT_FALSE(malloc_parameter_given("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"));
  ::setenv("MALLOC_MMAP_THRESHOLD_", "1048576", 1);
  EXPECT_TRUE(malloc_parameter_given("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"));
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=4194304", 1);
  EXPECT_TRUE(malloc_parameter_given("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"));
  EXPECT_FALSE(malloc_parameter_given("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"));
  ::unsetenv("GLIBC_TUNABLES");
}

TEST(PeakRssTest, ResetForgetsAFreedPeakAndSeesTheNextOne) {
  {
    auto block = resident_block(96 * kMiB);
    EXPECT_GE(peak_rss_bytes(), 96 * kMiB);
  }  // freed: large blocks go back to the kernel
  if (!reset_peak_rss())
    GTEST_SKIP() << "this kernel cannot reset the resident peak";
  const int64_t after_reset = peak_rss_bytes();
  const int64_t resident = current_rss_bytes();
  // The peak restarts at the resident set (counters settle in small batches).
  EXPECT_LT(after_reset, resident + 8 * kMiB);
  auto block = resident_block(64 * kMiB);
  EXPECT_GE(peak_rss_bytes(), after_reset + 60 * kMiB);
  EXPECT_LT(peak_rss_bytes(), after_reset + 72 * kMiB);
}

}  // namespace
}  // namespace bigbatch
