#pragma once
// The built-in `gpt`: a decoder-only transformer (GPT-2's layout, nanoGPT's naming). Token
// and learned position embeddings; `layers` pre-LayerNorm blocks of causal self-attention and
// a GELU MLP, each added to the residual stream; a final LayerNorm; logits from the token
// embedding itself (tied output: one parameter, seen once by the optimizer).
//
// Parameter names (the model is element 0 of a Sequential, so every name starts "0."):
//   0.token.weight [vocab, d]            0.position.weight [seq_len, d]
//   0.blocks.K.ln1.{weight,bias} [d]     0.blocks.K.qkv.{weight [3d, d], bias [3d]}
//   0.blocks.K.proj.{weight [d, d], bias} 0.blocks.K.ln2.{weight,bias}
//   0.blocks.K.fc.{weight [4d, d], bias}  0.blocks.K.out.{weight [d, 4d], bias}
//   0.ln_f.{weight,bias}
// tests/python/gpt_twin.py is the same network in PyTorch, loading these names with strict=True.
//
//   GptOptions options;
//   options.vocab = 257;  options.seq_len = 256;
//   torch::nn::Sequential model = make_gpt(options);
//   torch::Tensor logits = model->forward(tokens);  // [B, T] int64 -> [B, T, vocab]
#include <torch/torch.h>

#include <cstdint>

#include "models/accumulating_linear.h"

namespace bigbatch {

struct GptOptions {
  int64_t vocab = 257;
  int64_t seq_len = 256;  // positions the model has
  int64_t layers = 4;
  int64_t d_model = 128;
  int64_t heads = 4;
  double dropout = 0.0;
  // Each block's activations recomputed in the backward pass (models/recompute.h).
  bool recompute = false;
};

class GptBlockImpl : public torch::nn::Cloneable<GptBlockImpl> {
 public:
  explicit GptBlockImpl(const GptOptions& options);
  void reset() override;
  // x [B, T, d] -> [B, T, d]; recomputed in the backward pass under options.recompute.
  torch::Tensor forward(const torch::Tensor& x);
  // The block itself (what forward runs, and what recomputation runs again).
  torch::Tensor compute(const torch::Tensor& x);

  GptOptions options;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  AccumulatingLinear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(GptBlock);

class GptImpl : public torch::nn::Cloneable<GptImpl> {
 public:
  explicit GptImpl(const GptOptions& options);
  void reset() override;
  // tokens [B, T] int64 (T <= seq_len) -> logits [B, T, vocab]
  torch::Tensor forward(const torch::Tensor& tokens);

  GptOptions options;
  torch::nn::Embedding token{nullptr}, position{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Gpt);

torch::nn::Sequential make_gpt(const GptOptions& options);

}  // namespace bigbatch
