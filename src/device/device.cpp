#include "device/device.h"
#include "device/device_check.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "core/text.h"
#include "memory/cuda_memory.h"

namespace bigbatch {

namespace {

std::string visible_devices_note() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible ? std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')" : std::string();
}

// The device `choice` names for this process, or the Error that says why it cannot be; no
// side effect (the CUDA runtime counts devices without a context).
torch::Device choose_device(const DeviceChoice& choice, int64_t local_rank, int64_t world_size) {
  if (choice.kind == DeviceKind::Cpu)
    return torch::Device(torch::kCPU);
  const bool built_with_cuda = cuda_memory_supported();
  // A CPU-only libtorch answers 0 without touching a driver.
  const auto visible = static_cast<int64_t>(torch::cuda::device_count());
  if (choice.kind == DeviceKind::Auto && visible == 0)
    return torch::Device(torch::kCPU);
  const std::string flag = "--device " + choice.to_string();
  if (!built_with_cuda) {
    throw Error(ErrorKind::Config,
                flag + ": this bigbatch is built against a libtorch without CUDA (CPU only)",
                "use --device cpu (it also overrides the device of a --config file or of a "
                "resumed run), or build bigbatch against a CUDA libtorch (docs/gpu.md)");
  }
  if (visible == 0) {
    throw Error(
        ErrorKind::Config,
        flag + ": this libtorch has CUDA, but no CUDA device is visible" + visible_devices_note(),
        "check the GPU with nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu");
  }
  int64_t index = 0;
  if (choice.index >= 0) {
    index = choice.index;
  } else if (world_size > 1 && visible > 1) {
    // torchrun's convention: rank r of a machine takes its LOCAL_RANK's GPU. A rank that sees
    // a single device (CUDA_VISIBLE_DEVICES set per rank) takes that one.
    index = local_rank;
    if (index >= visible) {
      throw Error(
          ErrorKind::Config,
          flag + ": this rank's LOCAL_RANK is " + std::to_string(local_rank) + ", and " +
              std::to_string(visible) + " CUDA devices are visible" + visible_devices_note(),
          "start at most " + std::to_string(visible) + " ranks on this machine (one per GPU)");
    }
  }
  if (index >= visible) {
    throw Error(ErrorKind::Config,
                flag + ": " + std::to_string(visible) + " CUDA device" +
                    (visible == 1 ? " is" : "s are") + " visible (cuda:0" +
                    (visible > 1 ? " to cuda:" + std::to_string(visible - 1) : std::string()) +
                    ")" + visible_devices_note(),
                "name a visible device, or use --device cuda");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace

torch::Device resolve_device(const DeviceChoice& choice, int64_t local_rank, int64_t world_size) {
  const torch::Device device = choose_device(choice, local_rank, world_size);
  if (!device.is_cuda())
    return device;
  // Kernels, the caching allocator and NCCL's communicator follow the current device.
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(device);
  // The first tensor on the device starts CUDA up in libtorch, the caching allocator with it:
  // its statistics and memory fraction, which memory accounting reads and sets next, exist only
  // from then on.
  torch::empty({1}, torch::TensorOptions().device(device));
  return device;
}

void check_device_available(const DeviceChoice& choice) {
  choose_device(choice, /*local_rank=*/0, /*world_size=*/1);
}

std::string describe_device(const torch::Device& device) {
  if (!device.is_cuda())
    return device.str();
  const CudaDeviceInfo info = cuda_device_info(device.index());
  return device.str() + " (" + info.name + ", " + human_bytes(double(info.total_bytes)) + ", " +
         human_bytes(double(info.free_bytes)) + " free)";
}

int64_t device_memory_available(const torch::Device& device) {
  const CudaDeviceInfo info = cuda_device_info(device.index());
  return info.free_bytes + info.cached_bytes;
}

std::string short_out_of_memory_message(const std::string& what) {
  const std::string line = what.substr(0, what.find('\n'));
  const size_t first = line.find(". ");
  const size_t second = first == std::string::npos ? first : line.find(". ", first + 2);
  return second == std::string::npos ? line : line.substr(0, second + 1);
}

void synchronize_device(const torch::Device& device) {
  if (device.is_cuda())
    torch::cuda::synchronize(device.index());
}

Batch to_device(const Batch& batch, const torch::Device& device, bool non_blocking) {
  if (batch.inputs.device() == device && batch.targets.device() == device)
    return batch;
  return {batch.inputs.to(device, non_blocking), batch.targets.to(device, non_blocking),
          batch.items};
}

DeviceFeed::DeviceFeed(torch::Device device) : device_(device) {}
DeviceFeed::~DeviceFeed() = default;
DeviceFeed::DeviceFeed(DeviceFeed&&) noexcept = default;
DeviceFeed& DeviceFeed::operator=(DeviceFeed&&) noexcept = default;

Batch DeviceFeed::put(const Batch& host) {
  if (!device_.is_cuda())
    return host;
  // Queued on the current stream, ahead of the forward pass that reads them; from pinned
  // buffers the host does not wait (from pageable memory the copy is synchronous).
  Batch on_device = to_device(host, device_, /*non_blocking=*/true);
  if (!copied_)
    copied_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
  copied_->record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_));
  pending_ = true;
  return on_device;
}

void DeviceFeed::release_host() {
  if (!pending_)
    return;
  // c10::Event::synchronize() is libtorch 2.x only; query() is in both.
  while (!copied_->query())
    std::this_thread::yield();
  pending_ = false;
}

}  // namespace bigbatch
