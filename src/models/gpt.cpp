#include "models/gpt.h"

#include <cmath>

#include "core/error.h"
#include "models/causal_attention.h"
#include "models/recompute.h"

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

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x) {
  return options.recompute ? recomputed(this, x) : compute(x);
}

torch::Tensor GptBlockImpl::compute(const torch::Tensor& x) {
  // Dropout only when asked for: at p = 0 it would still cost a pass per call.
  // The dropout layer's own mode: verify turns it off alone (models.h, turn_off_dropout).
  const bool dropout_due = options.dropout > 0 && dropout->is_training();
  const auto drop = [&](const torch::Tensor& t) { return dropout_due ? dropout(t) : t; };
  // Causal self-attention: position t attends to positions <= t (models/causal_attention.h).
  const auto mixed = causal_attention(qkv(ln1(x)), options.heads, dropout_due, drop);
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
  for (const auto& block : *blocks)
    x = block->as<GptBlockImpl>()->forward(x);
  // The output layer is the token embedding itself (tied): logits = x E^T.
  return torch::matmul(ln_f(x), token->weight.t());
}

torch::nn::Sequential make_gpt(const GptOptions& options) {
  torch::nn::Sequential model;
  model->push_back(Gpt(options));
  return model;
}

}  // namespace bigbatch
