#include "train/precision.h"

#include <ATen/autocast_mode.h>

#include <fstream>

#include "core/error.h"

namespace bigbatch {

AutocastScope::AutocastScope(Precision precision) {
  if (precision != Precision::Bf16)
    return;
  active_ = true;
  was_enabled_ = at::autocast::is_cpu_enabled();
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_)
    return;
  // The cache holds bf16 copies of the weights for this forward pass; after the optimizer
  // step they would be stale.
  if (at::autocast::decrement_nesting() == 0)
    at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(was_enabled_);
}

bool cpu_has_native_bf16() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" avx512_bf16") != std::string::npos ||
             line.find(" amx_bf16") != std::string::npos;
    }
  }
  return false;
}

}  // namespace bigbatch
