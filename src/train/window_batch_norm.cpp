#include "train/window_batch_norm.h"

#include "core/error.h"
#include "device/device.h"

namespace bigbatch {

namespace {
// BatchNorm's buffers, whatever its dimensionality.
template <typename Impl>
bool read_buffers(torch::nn::Module* module, torch::Tensor* mean, torch::Tensor* var,
                  torch::Tensor* batches) {
  if (auto* bn = dynamic_cast<Impl*>(module)) {
    *mean = bn->running_mean;
    *var = bn->running_var;
    *batches = bn->num_batches_tracked;
    return true;
  }
  return false;
}

// Per-channel sum and sum of squares (channels on dimension 1), in float64 so a window of many
// micro-batches adds up without loss.
std::pair<torch::Tensor, torch::Tensor> channel_sums(const torch::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d)
    dims.push_back(d);
  const torch::Tensor x = input.to(torch::kFloat64);
  return {x.sum(dims), (x * x).sum(dims)};
}
}  // namespace

WindowBatchNorm::WindowBatchNorm(torch::nn::Sequential model, double momentum, Precision precision)
    : model_(std::move(model)), momentum_(momentum), precision_(precision) {
  size_t index = 0;
  for (const auto& child : model_->children()) {
    Layer layer;
    layer.index = index++;
    layer.module = child.get();
    auto* m = &layer.running_mean;
    auto* v = &layer.running_var;
    auto* b = &layer.batches_tracked;
    if (read_buffers<torch::nn::BatchNorm1dImpl>(layer.module, m, v, b) ||
        read_buffers<torch::nn::BatchNorm2dImpl>(layer.module, m, v, b) ||
        read_buffers<torch::nn::BatchNorm3dImpl>(layer.module, m, v, b)) {
      layers_.push_back(layer);
    }
  }
}

void WindowBatchNorm::begin(BatchAssembler& assembler, const std::vector<int64_t>& order,
                            const UpdateWindow& window) {
  end(/*applied=*/false);  // a window left open by an exception closes unapplied
  if (layers_.empty() || window.rank_size == 0)
    return;
  torch::NoGradGuard no_grad;
  for (auto& layer : layers_) {
    layer.saved_mean = layer.running_mean.clone();
    layer.saved_var = layer.running_var.clone();
  }
  open_ = true;
  const torch::Device device = model_device(*model_);
  // Layer by layer: the layers before this one already normalise by their window statistics.
  for (auto& layer : layers_) {
    torch::Tensor sum, sum_sq;
    int64_t count = 0;
    int64_t position = window.rank_begin;
    for (int64_t size : window.micro_batch_sizes) {
      const Batch batch = to_device(assembler.gather(order, position, size), device);
      position += size;
      torch::Tensor x = batch.inputs;
      {
        AutocastScope autocast(precision_, device.type());
        auto it = model_->begin();
        for (size_t i = 0; i < layer.index; ++i, ++it)
          x = it->forward(x);
      }
      auto [s, q] = channel_sums(x);
      sum = sum.defined() ? sum + s : s;
      sum_sq = sum_sq.defined() ? sum_sq + q : q;
      count += x.numel() / x.size(1);
    }
    const torch::Tensor mean = sum / double(count);
    const torch::Tensor var = (sum_sq / double(count) - mean * mean).clamp_min(0);
    layer.window_mean = mean.to(layer.running_mean.dtype());
    layer.window_var = var.to(layer.running_var.dtype());
    layer.window_count = count;
    layer.running_mean.copy_(layer.window_mean);
    layer.running_var.copy_(layer.window_var);
    layer.module->eval();  // eval-mode arithmetic: normalise by the buffers, leave them alone
  }
}

void WindowBatchNorm::suspend() {
  if (!open_)
    return;
  torch::NoGradGuard no_grad;
  for (auto& layer : layers_) {
    layer.running_mean.copy_(layer.saved_mean);
    layer.running_var.copy_(layer.saved_var);
  }
}

void WindowBatchNorm::resume() {
  if (!open_)
    return;
  torch::NoGradGuard no_grad;
  for (auto& layer : layers_) {
    layer.running_mean.copy_(layer.window_mean);
    layer.running_var.copy_(layer.window_var);
  }
}

void WindowBatchNorm::end(bool applied) {
  if (!open_)
    return;
  open_ = false;
  torch::NoGradGuard no_grad;
  for (auto& layer : layers_) {
    layer.running_mean.copy_(layer.saved_mean);
    layer.running_var.copy_(layer.saved_var);
    if (applied) {
      const double n = double(layer.window_count);
      const double unbiased = n > 1 ? n / (n - 1) : 1.0;
      layer.running_mean.mul_(1 - momentum_).add_(layer.window_mean, momentum_);
      layer.running_var.mul_(1 - momentum_).add_(layer.window_var, momentum_ * unbiased);
      if (layer.batches_tracked.defined())
        layer.batches_tracked.add_(1);
    }
    layer.module->train();
  }
}

}  // namespace bigbatch
