#pragma once
// Where a run computes (--device): the choice resolved for this process, and the copies of its
// batches to that device.
//
//  - resolve_device: cpu stays cpu; cuda is cuda:LOCAL_RANK under a launcher (each rank its own
//    GPU; cuda:0 when each rank sees one device, as Slurm's --gpus-per-task arranges) and
//    cuda:0 alone; cuda:N is that device; auto is cuda when this libtorch has CUDA and a device
//    is visible, else the CPU. What cannot work is one line naming the fix: a CPU-only build,
//    no visible device, an index past the visible ones.
//  - DeviceFeed: the engine's micro-batches go from the batch assembler's pinned host buffers
//    to the device without the host waiting for the copy; the copy's completion is recorded,
//    and waited for only before the assembler may refill that buffer. On the CPU it is the
//    batch itself, no copy.
//
//   torch::Device device = resolve_device(config.device, job.local_rank(), job.world_size);
//   model->to(device);
//   DeviceFeed feed(device);
//   Batch on_device = feed.put(host_batch);   // queued; host_batch must not change until:
//   feed.release_host();                      // its buffers may be reused
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "config/device_choice.h"
#include "data/dataset.h"
#include "models/models.h"

namespace c10 {
class Event;
}

namespace bigbatch {

// This process's device. `local_rank` is its place among the ranks on its machine (0 for a
// single process), `world_size` the job's ranks. Makes a CUDA device the current one.
torch::Device resolve_device(const DeviceChoice& choice, int64_t local_rank, int64_t world_size);

// "cpu", or "cuda:0 (NVIDIA H200, 139.8 GiB, 139.1 GiB free)".
std::string describe_device(const torch::Device& device);

// A GPU's memory this process could use now: free on the card, plus what its caching allocator
// holds unused (the budget of a fit without --memory-budget).
int64_t device_memory_available(const torch::Device& device);

// An out-of-memory error's text for one line: the CPU budget's message as it is; CUDA's
// ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ...",
// several lines of allocator advice) cut to its first two sentences.
std::string short_out_of_memory_message(const std::string& what);

// Waits for the work queued on the device (timings read on the host); nothing on the CPU.
void synchronize_device(const torch::Device& device);

// The batch on `device` (the batch itself when it is there already). `non_blocking`: the copy
// is queued and the host goes on (DeviceFeed's, from pinned buffers); otherwise a plain copy,
// for evaluation and set-up checks.
Batch to_device(const Batch& batch, const torch::Device& device, bool non_blocking = false);

// Copies of micro-batches to the device, queued behind the work before them (see above).
class DeviceFeed {
 public:
  explicit DeviceFeed(torch::Device device);
  ~DeviceFeed();
  DeviceFeed(DeviceFeed&&) noexcept;
  DeviceFeed& operator=(DeviceFeed&&) noexcept;

  // `host` on the device. On a GPU the copies are queued on the current stream and the host
  // goes on; `host`'s buffers must stay unchanged until release_host().
  Batch put(const Batch& host);
  // Waits until the last put()'s copies have read their host buffers (on a GPU, usually long
  // done: they were queued ahead of the micro-step's forward pass).
  void release_host();
  const torch::Device& device() const { return device_; }

 private:
  torch::Device device_;
  std::unique_ptr<c10::Event> copied_;  // recorded after the last put()'s copies (GPU only)
  bool pending_ = false;
};

}  // namespace bigbatch
