#pragma once
// --recompute (activation checkpointing: Chen et al. 2016; torch.utils.checkpoint's reentrant
// form): a block's forward pass keeps none of its activations, only its input; its backward runs
// the block's forward again from that input, with autograd on, and back-propagates through it.
// A micro-batch then holds one block's activations at a time in its backward instead of every
// block's, for one more forward pass of each block.
//
// Exact, not approximately so: the recomputation runs the same kernels on the same values, and
// draws the same random numbers — the default generator of the input's device is set to its
// state at the block's forward for the recomputation, and put back afterwards, so dropout masks
// are replayed and later draws are those of a run without recomputation. Parameter gradients are
// accumulated by the inner backward into the same .grad (their accumulators' hooks fire as
// usual), so the weights after any number of updates are bit for bit those without it
// (tests/e2e: the gpt with dropout). A block whose forward updates running statistics
// (BatchNorm) would update them twice: not for such blocks.
//
//   torch::Tensor GptBlockImpl::forward(const torch::Tensor& x) {
//     return recompute_ && recomputable(x) ? recomputed(this, x) : compute(x);
//   }
//   // compute(x): the block's own forward; `this` lives until the backward pass has run.
#include <torch/torch.h>

#include <cstdint>

namespace bigbatch {

// Whether a block's forward of `x` would be recomputed: only under autograd (evaluation keeps
// nothing anyway), and when `x` carries a gradient (else the block's output would carry none).
inline bool recomputable(const torch::Tensor& x) {
  return torch::GradMode::is_enabled() && x.requires_grad();
}

// The random generator's state of `device`, and setting it (CPU or an accelerator's default).
torch::Tensor generator_state(const torch::Device& device);
void set_generator_state(const torch::Device& device, const torch::Tensor& state);

namespace detail {

template <typename Block>
struct RecomputedBlock : public torch::autograd::Function<RecomputedBlock<Block>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               Block* block) {
    // Under no autograd here (Function::apply): nothing of the block's forward is kept.
    ctx->saved_data["generator"] = generator_state(input.device());
    // The block is a module of the model, which outlives the backward pass.
    ctx->saved_data["block"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(block));
    ctx->save_for_backward({input});
    return block->compute(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* block = reinterpret_cast<Block*>(static_cast<intptr_t>(ctx->saved_data["block"].toInt()));
    torch::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    const torch::Device device = input.device();
    const torch::Tensor after_forward = generator_state(device);
    set_generator_state(device, ctx->saved_data["generator"].toTensor());
    torch::Tensor output;
    {
      torch::AutoGradMode enabled(true);
      output = block->compute(input);
    }
    set_generator_state(device, after_forward);
    torch::autograd::backward({output}, {grad_outputs[0]});
    return {input.grad(), torch::Tensor()};
  }
};

}  // namespace detail

// block->compute(x), recomputed in the backward pass (see the top of this file).
template <typename Block>
torch::Tensor recomputed(Block* block, const torch::Tensor& x) {
  return detail::RecomputedBlock<Block>::apply(x, block);
}

}  // namespace bigbatch
