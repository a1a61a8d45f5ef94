#include "models/accumulating_linear.h"

#include <vector>

namespace bigbatch {

namespace {

// Adds `update` into `parameter`'s gradient in place, or makes it the gradient when there is
// none yet (the window's first micro-step after the engine released the last one).
void accumulate_into_grad(const torch::Tensor& parameter, const torch::Tensor& update) {
  torch::Tensor& grad = parameter.mutable_grad();
  if (grad.defined()) {
    grad.add_(update);
  } else {
    grad = update;
  }
}

class FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    // Inputs are saved as themselves (not as copies): backward writes into the parameters' .grad.
    ctx->save_for_backward({input, weight, bias});
    return torch::nn::functional::linear(input, weight, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& bias = saved[2];
    const torch::Tensor& grad_output = grad_outputs[0];
    const int64_t out_features = weight.size(0);
    const int64_t in_features = weight.size(1);
    // Leading dimensions are rows of one matrix product.
    const torch::Tensor grad_2d = grad_output.reshape({-1, out_features});
    const torch::Tensor input_2d = input.reshape({-1, in_features});

    torch::Tensor grad_input;
    if (ctx->needs_input_grad(0))
      grad_input = grad_output.matmul(weight);
    if (ctx->needs_input_grad(1)) {
      torch::Tensor& grad = weight.mutable_grad();
      if (grad.defined()) {
        grad.addmm_(grad_2d.t(), input_2d);  // the fused accumulation
      } else {
        grad = grad_2d.t().mm(input_2d);
      }
    }
    if (bias.defined() && ctx->needs_input_grad(2))
      accumulate_into_grad(bias, grad_2d.sum(0));
    // Nothing returned for the parameters: autograd's own accumulation is not to run again.
    return {grad_input, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

AccumulatingLinearImpl::AccumulatingLinearImpl(int64_t in_features, int64_t out_features)
    : AccumulatingLinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}

AccumulatingLinearImpl::AccumulatingLinearImpl(const torch::nn::LinearOptions& options_)
    : options(options_) {
  reset();
}

void AccumulatingLinearImpl::reset() {
  // torch::nn::Linear's own initialisation, drawing the same random numbers.
  torch::nn::Linear reference(options);
  weight = register_parameter("weight", reference->weight);
  bias = options.bias() ? register_parameter("bias", reference->bias)
                        : register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
}

torch::Tensor AccumulatingLinearImpl::forward(const torch::Tensor& input) {
  // Fusion pays where backward will add to an existing gradient: in a window's micro-steps
  // after the first. The first (and every step without accumulation) finds no gradient and
  // takes autograd's own path, which hands its fresh gradient over at no cost.
  const bool accumulates = fuse_gradient_accumulation && torch::GradMode::is_enabled() &&
                           weight.requires_grad() && weight.grad().defined();
  if (!accumulates)
    return torch::nn::functional::linear(input, weight, bias);
  return FusedLinearFunction::apply(input, weight, bias);
}

void AccumulatingLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "bigbatch::AccumulatingLinear(in_features=" << options.in_features()
         << ", out_features=" << options.out_features() << ", bias=" << std::boolalpha
         << options.bias() << ")";
}

int64_t set_gradient_accumulation_fusion(torch::nn::Module& model, bool enabled) {
  int64_t count = 0;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (auto* linear = dynamic_cast<AccumulatingLinearImpl*>(module.get())) {
      linear->fuse_gradient_accumulation = enabled;
      ++count;
    }
  }
  return count;
}

}  // namespace bigbatch
