#include "models/gpt.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace bigbatch {

namespace {

// GPT-2's initialisation: N(0, 0.02) for weights and embeddings, zero biases, and the
// projections into the residual stream scaled by 1 / sqrt(2 x layers), so the stream's variance
// does not grow with depth.
void init_linear(AccumulatingLinear& layer, double std) {
  torch::NoGradGuard no_grad;
  layer->weight.normal_(0.0, std);
  layer->bias.zero_();
}

}  // namespace

GptBlockImpl::GptBlockImpl(const GptOptions& options_in) : options(options_in) {
  reset();
}

void GptBlockImpl::reset() {
  const int64_t d = options.d_model;
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  qkv = register_module("qkv", AccumulatingLinear(d, 3 * d));
  proj = register_module("proj", AccumulatingLinear(d, d));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  fc = register_module("fc", AccumulatingLinear(d, 4 * d));
  out = register_module("out", AccumulatingLinear(4 * d, d));
  dropout = register_module("dropout", torch::nn::Dropout(options.dropout));
  const double residual_std = 0.02 / std::sqrt(2.0 * double(options.layers));
  init_linear(qkv, 0.02);
  init_linear(proj, residual_std);
  init_linear(fc, 0.02);
  init_linear(out, residual_std);
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& future) {
  const int64_t batch = x.size(0);
  const int64_t length = x.size(1);
  const int64_t d = options.d_model;
  const int64_t heads = options.heads;
  const int64_t head_dim = d / heads;
  // Dropout only when asked for: at p = 0 it would still cost a pass per call.
  const auto drop = [&](const torch::Tensor& t) { return options.dropout > 0 ? dropout(t) : t; };
  // Causal self-attention: position t attends to positions <= t. Padding sits at the end of a
  // row, so no real position ever attends to it.
  auto qkv_out = qkv(ln1(x)).chunk(3, /*dim=*/-1);
  auto split_heads = [&](const torch::Tensor& t) {
    return t.view({batch, length, heads, head_dim}).transpose(1, 2);  // [B, H, T, hd]
  };
  // The 1/sqrt(hd) scale on q ([B, H, T, hd]) rather than on the scores ([B, H, T, T]).
  const auto q = split_heads(qkv_out[0]) * (1.0 / std::sqrt(double(head_dim)));
  const auto k = split_heads(qkv_out[1]);
  const auto v = split_heads(qkv_out[2]);
  // In place: matmul's backward needs its inputs, not its output.
  auto scores = torch::matmul(q, k.transpose(-2, -1))
                    .masked_fill_(future, -std::numeric_limits<double>::infinity());
  auto attention = drop(torch::softmax(scores, /*dim=*/-1));
  auto mixed = torch::matmul(attention, v).transpose(1, 2).reshape({batch, length, d});
  auto h = x + drop(proj(mixed));
  return h + drop(out(torch::gelu(fc(ln2(h)))));
}

GptImpl::GptImpl(const GptOptions& options_in) : options(options_in) {
  reset();
}

void GptImpl::reset() {
  BB_INTERNAL_ASSERT(options.d_model % options.heads == 0, "d_model must divide into the heads");
  token = register_module("token", torch::nn::Embedding(options.vocab, options.d_model));
  position = register_module("position", torch::nn::Embedding(options.seq_len, options.d_model));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t layer = 0; layer < options.layers; ++layer)
    blocks->push_back(GptBlock(options));
  ln_f =
      register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.d_model})));
  dropout = register_module("dropout", torch::nn::Dropout(options.dropout));
  torch::NoGradGuard no_grad;
  token->weight.normal_(0.0, 0.02);
  position->weight.normal_(0.0, 0.02);
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const int64_t length = tokens.size(1);
  BB_INTERNAL_ASSERT(length <= options.seq_len, "a sequence longer than the model's positions");
  const auto positions = torch::arange(length, tokens.options().dtype(torch::kInt64));
  auto x = token(tokens) + position(positions);
  if (options.dropout > 0)
    x = dropout(x);
  // Which key positions each query may not see (the future), shared by every block.
  const auto future = torch::ones({length, length}, tokens.options().dtype(torch::kBool)).triu(1);
  for (const auto& block : *blocks)
    x = block->as<GptBlockImpl>()->forward(x, future);
  // The output layer is the token embedding itself (tied): logits = x E^T.
  return torch::matmul(ln_f(x), token->weight.t());
}

torch::nn::Sequential make_gpt(const GptOptions& options) {
  torch::nn::Sequential model;
  model->push_back(Gpt(options));
  return model;
}

}  // namespace bigbatch
