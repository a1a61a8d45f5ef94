#pragma once
// --recompute (activation checkpointing: Chen et al. 2016; torch.utils.checkpoint's reentrant
// form): a block's forward pass keeps none of its activations, only its input; its backward runs
// the block's forward again from that input, with autograd on, and back-propagates through it.
// A micro-batch then holds one block's activations at a time in its backward instead of every
// block's, for one more forward pass of each block. The gpt's blocks recompute themselves
// (models/gpt.h). Not the built-in cnn's: its peak is its first block's activations, which a
// recomputation makes all the same (measured with its layers in recomputed segments: exact,
// and a peak 12-22% higher at micro-batch 128, docs/benchmarks.md).
//
// Exact, not approximately so: the recomputation runs the same kernels on the same values, and
// draws the same random numbers — the default generator of the input's device is set to its
// state at the block's forward for the recomputation, and put back afterwards, so dropout masks
// are replayed and later draws are those of a run without recomputation. Parameter gradients are
// accumulated by the inner backward into the same .grad (their accumulators' hooks fire as
// usual), so the weights after any number of updates are bit for bit those without it (e2e.lm,
// e2e.distributed). A block whose input carries no gradient (embeddings that do not train) is
// recomputed too: the inner backward then reaches its parameters only.
//
//   torch::Tensor GptBlockImpl::forward(const torch::Tensor& x) {
//     return options.recompute ? recomputed(this, x) : compute(x);
//   }
//   // Block: compute(x), the block's own forward (no buffers it updates); alive until the
//   // backward.
#include <torch/torch.h>

#include <cstdint>

namespace bigbatch {

// The random generator's state of `device`, and setting it (CPU or an accelerator's default).
torch::Tensor generator_state(const torch::Device& device);
void set_generator_state(const torch::Device& device, const torch::Tensor& state);

namespace detail {

template <typename Block>
struct RecomputedBlock : public torch::autograd::Function<RecomputedBlock<Block>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               Block* block, bool input_needs_grad) {
    // Under no autograd here (Function::apply): nothing of the block's forward is kept.
    ctx->saved_data["generator"] = generator_state(input.device());
    // The block belongs to the model, which outlives the backward pass.
    ctx->saved_data["block"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(block));
    ctx->saved_data["input_needs_grad"] = input_needs_grad;
    ctx->save_for_backward({input});
    return block->compute(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* block = reinterpret_cast<Block*>(static_cast<intptr_t>(ctx->saved_data["block"].toInt()));
    const bool input_needs_grad = ctx->saved_data["input_needs_grad"].toBool();
    torch::Tensor input = ctx->get_saved_variables()[0].detach();
    if (input_needs_grad)
      input.requires_grad_(true);
    const torch::Device device = input.device();
    const torch::Tensor after_forward = generator_state(device);
    set_generator_state(device, ctx->saved_data["generator"].toTensor());
    torch::Tensor output;
    {
      torch::AutoGradMode enabled(true);
      output = block->compute(input);
    }
    set_generator_state(device, after_forward);
    if (output.requires_grad())
      torch::autograd::backward({output}, {grad_outputs[0]});
    return {input_needs_grad ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace detail

// block->compute(x), recomputed in the backward pass (see the top of this file). Under autograd
// only: evaluation keeps nothing anyway.
template <typename Block>
torch::Tensor recomputed(Block* block, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled())
    return block->compute(x);
  // An input without a gradient still needs an output with one (the parameters' gradients
  // flow through it): the Function is given a leaf that asks for one, which it never fills.
  const bool needs_grad = x.requires_grad();
  return detail::RecomputedBlock<Block>::apply(needs_grad ? x : x.detach().requires_grad_(true),
                                               block, needs_grad);
}

}  // namespace bigbatch
