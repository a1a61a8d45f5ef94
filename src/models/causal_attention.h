#pragma once
// Causal multi-head self-attention, from a fused q|k|v projection to the heads' mixed values:
//   qkv [B, T, 3d] (q, k, v side by side, each d = heads x head_dim wide) -> [B, T, d],
//   out = softmax(q k^T / sqrt(head_dim), keys <= query) v, per head.
//
// Two implementations of the same mathematics:
//  - causal_attention_reference: the textbook composition (split heads, one batched matmul for
//    every score, mask, softmax, matmul), any device and dtype, with dropout on the
//    probabilities. PyTorch's own models compute this.
//  - causal_attention_cpu: one autograd function for fp32/fp64 tensors on the CPU. Each head's
//    matrix products run on one thread, heads in parallel (at d = 128 a product is too small to
//    split well between threads); they read q, k and v where the projection wrote them and
//    write the output in [B, T, d] (no copies to and from [B, H, T, hd]); and they skip the
//    future — blocks of the score matrix above the diagonal are neither computed nor multiplied
//    (at T = 256 in blocks of 64: 10 of 16 blocks). Softmax and its backward are libtorch's.
// causal_attention() picks the second wherever it applies (fusable_attention) and the first
// elsewhere. tests/torch/causal_attention_test.cpp holds them equal in float64.
#include <torch/torch.h>

#include <cstdint>
#include <functional>

namespace bigbatch {

// The textbook composition. `dropout` is applied to the attention probabilities (training).
torch::Tensor causal_attention_reference(
    const torch::Tensor& qkv, int64_t heads,
    const std::function<torch::Tensor(const torch::Tensor&)>& dropout = nullptr);

// The CPU kernel (see above). Requires fusable_attention(qkv).
torch::Tensor causal_attention_cpu(const torch::Tensor& qkv, int64_t heads);

// Whether causal_attention_cpu computes this input: a contiguous fp32 or fp64 CPU tensor.
bool fusable_attention(const torch::Tensor& qkv);

// The CPU kernel where it applies and no dropout is due; the reference otherwise.
torch::Tensor causal_attention(
    const torch::Tensor& qkv, int64_t heads, bool dropout_due,
    const std::function<torch::Tensor(const torch::Tensor&)>& dropout = nullptr);

}  // namespace bigbatch
