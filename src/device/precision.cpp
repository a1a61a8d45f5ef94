#include "device/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <fstream>

#include "core/error.h"

namespace bigbatch {

namespace {

// libtorch 2.4 made autocast's switches one set keyed by device type (and deprecated the
// per-device functions 1.13 has).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(c10::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
void enable_autocast(c10::DeviceType device, bool enabled) {
  if (enabled)
    at::autocast::set_autocast_dtype(device, at::kBFloat16);
  at::autocast::set_autocast_enabled(device, enabled);
}
#else
bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
}
void enable_autocast(c10::DeviceType device, bool enabled) {
  if (device == c10::DeviceType::CUDA) {
    if (enabled)
      at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(enabled);
    return;
  }
  if (enabled)
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(enabled);
}
#endif

}  // namespace

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) : device_(device) {
  if (precision != Precision::Bf16)
    return;
  active_ = true;
  was_enabled_ = autocast_enabled(device_);
  enable_autocast(device_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_)
    return;
  // The cache holds bf16 copies of the weights for this forward pass; after the optimizer
  // step they would be stale.
  if (at::autocast::decrement_nesting() == 0)
    at::autocast::clear_cache();
  enable_autocast(device_, was_enabled_);
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
