#pragma once
// Whether this build and machine can compute on a --device, for commands that only hand the
// choice on (`bigbatch sweep` runs its cells as `train` processes): the refusal `train` would
// print, before anything is written, without starting CUDA in the calling process. Torch-free
// to include; device/device.h resolves the device for the process that computes.
#include "config/device_choice.h"

namespace bigbatch {

// Throws the Error (Config) resolve_device would, for a single process; returns otherwise.
void check_device_available(const DeviceChoice& choice);

}  // namespace bigbatch
