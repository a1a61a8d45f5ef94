#pragma once
// Mixed precision: --precision bf16 runs the forward pass under libtorch's autocast to
// bfloat16 (matrix multiplications and convolutions in bf16 where the CPU has native bf16, as
// this machine's AVX-512 BF16 does), while the weights, the loss, the gradients and their
// accumulation over micro-steps stay fp32: autocast's casts are differentiable, so each
// parameter's gradient arrives in the parameter's own dtype (fp32) and adds into an fp32
// .grad. Accumulating in bf16 would lose precision over many micro-steps (8 significant bits).
//
//   {
//     AutocastScope autocast(Precision::Bf16);
//     logits = model->forward(inputs);
//   }
//   loss = cross_entropy(logits.to(torch::kFloat32), targets);   // fp32 outside the scope
#include <c10/core/DeviceType.h>

#include <string>

#include "config/modes.h"

namespace bigbatch {

// Enables autocast to bfloat16 on `device` (the CPU, or CUDA) for its lifetime (nothing for
// Fp32); restores the previous state and drops autocast's cached weight casts on leaving, so
// the next forward pass casts the updated weights.
class AutocastScope {
 public:
  explicit AutocastScope(Precision precision, c10::DeviceType device = c10::DeviceType::CPU);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  bool was_enabled_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;
};

// Whether the CPU computes bf16 natively (AVX-512 BF16 or AMX); without it bf16 is emulated
// and slower than fp32, which the trainer warns about.
bool cpu_has_native_bf16();

}  // namespace bigbatch
