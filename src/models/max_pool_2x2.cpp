#include "models/max_pool_2x2.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace bigbatch {

namespace {

// Planes (one image's channel) per parallel chunk: enough work to outweigh a thread hand-off.
int64_t planes_per_chunk(int64_t plane_size) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, plane_size));
}

// libtorch's rule: a value replaces the maximum when greater than it or NaN. Which of a window's
// four values wins is data: a branch per comparison would be mispredicted half the time and
// cost more than the comparisons. Without NaN, the rule is max (maxss) and a conditional move
// for the position; a window with a NaN (one test, never taken in healthy training) takes the
// rule as written.
inline void challenge(float value, uint8_t position, float& best, uint8_t& at) {
  at = best < value ? position : at;
  best = std::max(best, value);  // `best < value ? value : best`: the first of equal maxima stays
}

inline void challenge_with_nan(float value, uint8_t position, float& best, uint8_t& at) {
  if (value > best || value != value) {
    best = value;
    at = position;
  }
}

// An N x C x H x W input seen as N x C planes, and its pooled size.
struct PlaneGeometry {
  explicit PlaneGeometry(const torch::Tensor& input)
      : planes(input.size(0) * input.size(1)),
        height(input.size(2)),
        width(input.size(3)),
        out_height(height / 2),
        out_width(width / 2) {}
  int64_t planes, height, width, out_height, out_width;
};

// Pools `input` (contiguous fp32 N x C x H x W) into `output`; when `winners` is defined, also
// records each window's winning position (0..3, row-major in the window).
void pool_forward(const torch::Tensor& input, torch::Tensor& output, torch::Tensor& winners) {
  const PlaneGeometry shape(input);
  const float* in = input.data_ptr<float>();
  float* out = output.data_ptr<float>();
  uint8_t* win = winners.defined() ? winners.data_ptr<uint8_t>() : nullptr;
  at::parallel_for(0, shape.planes, planes_per_chunk(shape.height * shape.width),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t plane = begin; plane < end; ++plane) {
                       for (int64_t i = 0; i < shape.out_height; ++i) {
                         const float* row0 = in + (plane * shape.height + 2 * i) * shape.width;
                         const float* row1 = row0 + shape.width;
                         const int64_t o = (plane * shape.out_height + i) * shape.out_width;
                         for (int64_t j = 0; j < shape.out_width; ++j) {
                           const float a = row0[2 * j], b = row0[2 * j + 1], c = row1[2 * j],
                                       d = row1[2 * j + 1];
                           float best = a;
                           uint8_t at = 0;
                           if (__builtin_expect((a != a) | (b != b) | (c != c) | (d != d), 0)) {
                             challenge_with_nan(b, 1, best, at);
                             challenge_with_nan(c, 2, best, at);
                             challenge_with_nan(d, 3, best, at);
                           } else {
                             challenge(b, 1, best, at);
                             challenge(c, 2, best, at);
                             challenge(d, 3, best, at);
                           }
                           out[o + j] = best;
                           if (win != nullptr)
                             win[o + j] = at;
                         }
                       }
                     }
                   });
}

// `gradient` where `selected`, else +0 (what libtorch's zero-filled gradient holds): a bit mask
// rather than a branch (mispredicted half the time) or a product (0 x -g is -0, 0 x inf NaN).
inline float gradient_if(bool selected, float gradient) {
  uint32_t bits;
  std::memcpy(&bits, &gradient, sizeof bits);
  bits &= 0u - static_cast<uint32_t>(selected);
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

// Writes every element of `grad_input`: each window's gradient at its winner, zeros elsewhere
// (including an odd size's last row and column, which no window covers).
void pool_backward(const torch::Tensor& grad_output, const torch::Tensor& winners,
                   torch::Tensor& grad_input) {
  const PlaneGeometry shape(grad_input);
  const float* go = grad_output.data_ptr<float>();
  const uint8_t* win = winners.data_ptr<uint8_t>();
  float* gi = grad_input.data_ptr<float>();
  at::parallel_for(0, shape.planes, planes_per_chunk(shape.height * shape.width),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t plane = begin; plane < end; ++plane) {
                       float* plane_grad = gi + plane * shape.height * shape.width;
                       for (int64_t i = 0; i < shape.out_height; ++i) {
                         float* row0 = plane_grad + 2 * i * shape.width;
                         float* row1 = row0 + shape.width;
                         const int64_t o = (plane * shape.out_height + i) * shape.out_width;
                         for (int64_t j = 0; j < shape.out_width; ++j) {
                           const float g = go[o + j];
                           const uint8_t at = win[o + j];
                           row0[2 * j] = gradient_if(at == 0, g);
                           row0[2 * j + 1] = gradient_if(at == 1, g);
                           row1[2 * j] = gradient_if(at == 2, g);
                           row1[2 * j + 1] = gradient_if(at == 3, g);
                         }
                         if (shape.width % 2 != 0) {
                           row0[shape.width - 1] = 0.0f;
                           row1[shape.width - 1] = 0.0f;
                         }
                       }
                       if (shape.height % 2 != 0)
                         std::fill(plane_grad + (shape.height - 1) * shape.width,
                                   plane_grad + shape.height * shape.width, 0.0f);
                     }
                   });
}

torch::Tensor empty_output(const torch::Tensor& input, torch::ScalarType dtype) {
  return torch::empty({input.size(0), input.size(1), input.size(2) / 2, input.size(3) / 2},
                      input.options().dtype(dtype));
}

class MaxPool2x2Function : public torch::autograd::Function<MaxPool2x2Function> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input) {
    torch::Tensor output = empty_output(input, torch::kFloat32);
    torch::Tensor winners = empty_output(input, torch::kUInt8);
    pool_forward(input, output, winners);
    ctx->save_for_backward({winners});
    ctx->saved_data["height"] = input.size(2);
    ctx->saved_data["width"] = input.size(3);
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor winners = ctx->get_saved_variables()[0];
    const torch::Tensor grad_output = grad_outputs[0].contiguous();
    torch::Tensor grad_input =
        torch::empty({winners.size(0), winners.size(1), ctx->saved_data["height"].toInt(),
                      ctx->saved_data["width"].toInt()},
                     grad_output.options());
    pool_backward(grad_output, winners, grad_input);
    return {grad_input};
  }
};

bool specialised(const torch::Tensor& input) {
  return input.dim() == 4 && input.scalar_type() == torch::kFloat32 && input.is_cpu() &&
         input.is_contiguous() && input.size(2) >= 2 && input.size(3) >= 2;
}

}  // namespace

torch::Tensor max_pool_2x2(const torch::Tensor& input) {
  if (!specialised(input))
    return torch::max_pool2d(input, 2);
  if (torch::GradMode::is_enabled() && input.requires_grad())
    return MaxPool2x2Function::apply(input);
  // No gradient to route (evaluation): no winners to keep.
  torch::Tensor output = empty_output(input, torch::kFloat32);
  torch::Tensor none;
  pool_forward(input, output, none);
  return output;
}

torch::Tensor MaxPool2x2Impl::forward(const torch::Tensor& input) {
  return max_pool_2x2(input);
}

void MaxPool2x2Impl::pretty_print(std::ostream& stream) const {
  stream << "bigbatch::MaxPool2x2";
}

}  // namespace bigbatch
