#pragma once
// Where a run computes, as the user asks for it (--device): the CPU, a CUDA device, or
// whichever is there. Torch-free: parsing and its errors are unit-tested and fuzzed with the
// rest of the configuration; device/device.h turns a choice into a torch::Device once the
// process knows its rank and what libtorch can see.
//
//   DeviceChoice d = DeviceChoice::parse("cuda:1");   // d.kind == DeviceKind::Cuda, d.index == 1
//   d.to_string();                                     // "cuda:1"
#include <cstdint>
#include <string>

namespace bigbatch {

enum class DeviceKind {
  Cpu,   // the CPU (default)
  Cuda,  // a CUDA device: index, or the rank's LOCAL_RANK (0 for one process)
  Auto,  // CUDA when this libtorch has it and a device is visible, else the CPU
};

struct DeviceChoice {
  DeviceKind kind = DeviceKind::Cpu;
  int64_t index = -1;  // cuda:N; -1: not given

  // "cpu", "cuda", "cuda:N" or "auto"; anything else is an Error (Config) naming the choices
  // (with a "did you mean" for near misses such as "gpu" or "cuda0").
  static DeviceChoice parse(const std::string& text);
  std::string to_string() const;
  bool operator==(const DeviceChoice& other) const {
    return kind == other.kind && index == other.index;
  }
};

}  // namespace bigbatch
