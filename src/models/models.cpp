#include "models/models.h"

#include <torch/version.h>

#include <cmath>

#include "core/error.h"
#include "models/accumulating_linear.h"
#include "models/max_pool_2x2.h"
#include "models/user_module.h"

namespace bigbatch {

namespace {

torch::nn::Sequential make_mlp(const ModelSpec& spec) {
  torch::nn::Sequential model;
  model->push_back(torch::nn::Flatten());
  int64_t width = spec.channels * spec.height * spec.width;
  for (int64_t hidden : spec.hidden) {
    model->push_back(AccumulatingLinear(width, hidden));
    model->push_back(torch::nn::ReLU());
    width = hidden;
  }
  model->push_back(AccumulatingLinear(width, spec.classes));
  return model;
}

enum class ConvNorm { None, Batch, Group };

// conv3x3(32) [norm] relu maxpool2 - conv3x3(64) [norm] relu maxpool2 - fc128 relu - fc(classes).
// Unpadded convolutions, as in ../shared/PERF_NOTES.md's measured peers.
//
// Built as conv [norm] maxpool2 relu: max pooling commutes with ReLU (both monotone; a window's
// winner is the same, and where it is <= 0 both orders pass no gradient), so outputs and
// gradients are bit-identical to the usual order while the ReLU touches a quarter of the
// elements and keeps a quarter of the activation for its backward pass. Neither layer has
// parameters, so parameter names (and weights files) are those of the usual order.
torch::nn::Sequential make_cnn(const ModelSpec& spec, ConvNorm norm) {
  torch::nn::Sequential model;
  int64_t height = spec.height;
  int64_t width = spec.width;
  int64_t channels = spec.channels;
  for (int64_t out_channels : {32, 64}) {
    // A conv followed by BatchNorm needs no bias (BN's shift replaces it).
    model->push_back(torch::nn::Conv2d(
        torch::nn::Conv2dOptions(channels, out_channels, 3).bias(norm != ConvNorm::Batch)));
    if (norm == ConvNorm::Batch)
      model->push_back(torch::nn::BatchNorm2d(out_channels));
    if (norm == ConvNorm::Group)
      model->push_back(torch::nn::GroupNorm(8, out_channels));
    model->push_back(MaxPool2x2());  // torch::nn::MaxPool2d(2), specialised
    model->push_back(torch::nn::ReLU());
    height = (height - 2) / 2;
    width = (width - 2) / 2;
    channels = out_channels;
    if (height <= 0 || width <= 0) {
      throw Error(ErrorKind::Config,
                  "images of " + std::to_string(spec.height) + "x" + std::to_string(spec.width) +
                      " are too small for the cnn models",
                  "use --model mlp for images smaller than 10x10");
    }
  }
  model->push_back(torch::nn::Flatten());
  model->push_back(AccumulatingLinear(channels * height * width, 128));
  model->push_back(torch::nn::ReLU());
  model->push_back(AccumulatingLinear(128, spec.classes));
  return model;
}

}  // namespace

torch::nn::Sequential make_model(const ModelSpec& spec) {
  switch (builtin_model_names().parse(spec.name)) {
    case BuiltinModel::Mlp:
      return make_mlp(spec);
    case BuiltinModel::Cnn:
      return make_cnn(spec, ConvNorm::None);
    case BuiltinModel::CnnBn:
      return make_cnn(spec, ConvNorm::Batch);
    case BuiltinModel::CnnGn:
      return make_cnn(spec, ConvNorm::Group);
    case BuiltinModel::Gpt:
      return make_gpt(spec.gpt);
  }
  BB_INTERNAL_ASSERT(false, "a built-in model without a builder");
  return nullptr;
}

std::string libtorch_description() {
#ifdef BIGBATCH_WITH_CUDA
  const char* cuda = " with CUDA";
#else
  const char* cuda = "";
#endif
  return "libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." +
         std::to_string(TORCH_VERSION_MINOR) + "." + std::to_string(TORCH_VERSION_PATCH) + cuda;
}

std::vector<std::string> batch_statistics_layers(torch::nn::Module& model) {
  if (auto* module = as_user_module(model))
    return module->layers_of(LayerKind::BatchNorm, /*training_only=*/true);
  std::vector<std::string> names;
  for (const auto& item : model.named_modules()) {
    const auto& module = item.value();
    // A frozen BatchNorm (eval mode in training) uses running statistics: no batch dependence.
    if ((module->as<torch::nn::BatchNorm1d>() || module->as<torch::nn::BatchNorm2d>() ||
         module->as<torch::nn::BatchNorm3d>()) &&
        module->is_training()) {
      names.push_back(item.key());
    }
  }
  return names;
}

bool uses_batch_statistics(torch::nn::Module& model) {
  return !batch_statistics_layers(model).empty();
}

namespace {
bool is_batch_norm(const std::shared_ptr<torch::nn::Module>& module) {
  return module->as<torch::nn::BatchNorm1d>() || module->as<torch::nn::BatchNorm2d>() ||
         module->as<torch::nn::BatchNorm3d>();
}
}  // namespace

namespace {
// Dropout that draws masks: libtorch's dropout modules with p > 0.
bool is_live_dropout(const torch::nn::Module& module) {
  if (const auto* d = module.as<torch::nn::Dropout>())
    return d->options.p() > 0;
  if (const auto* d = module.as<torch::nn::Dropout2d>())
    return d->options.p() > 0;
  if (const auto* d = module.as<torch::nn::Dropout3d>())
    return d->options.p() > 0;
  if (const auto* d = module.as<torch::nn::AlphaDropout>())
    return d->options.p() > 0;
  if (const auto* d = module.as<torch::nn::FeatureAlphaDropout>())
    return d->options.p() > 0;
  return false;
}
}  // namespace

std::vector<std::string> dropout_layers(torch::nn::Module& model) {
  if (auto* module = as_user_module(model))
    return module->layers_of(LayerKind::Dropout, /*training_only=*/true);
  std::vector<std::string> names;
  for (const auto& item : model.named_modules()) {
    if (is_live_dropout(*item.value()) && item.value()->is_training())
      names.push_back(item.key());
  }
  return names;
}

void turn_off_dropout(torch::nn::Module& model) {
  if (auto* module = as_user_module(model))
    module->freeze(LayerKind::Dropout);
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (is_live_dropout(*module))
      module->eval();
  }
}

void apply_batch_norm_mode(torch::nn::Module& model, BatchNormMode mode) {
  if (mode != BatchNormMode::Frozen)
    return;
  if (auto* module = as_user_module(model))
    module->freeze(LayerKind::BatchNorm);
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (is_batch_norm(module))
      module->eval();
  }
}

double micro_step_momentum(double momentum, int64_t micro_steps) {
  if (micro_steps <= 1)
    return momentum;
  return 1.0 - std::pow(1.0 - momentum, 1.0 / double(micro_steps));
}

void set_batch_norm_momentum(torch::nn::Module& model, double momentum) {
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (auto* bn = module->as<torch::nn::BatchNorm1d>())
      bn->options.momentum(momentum);
    if (auto* bn = module->as<torch::nn::BatchNorm2d>())
      bn->options.momentum(momentum);
    if (auto* bn = module->as<torch::nn::BatchNorm3d>())
      bn->options.momentum(momentum);
  }
}

torch::nn::Sequential rewrite_batch_norm_as_group_norm(const torch::nn::Sequential& model) {
  torch::nn::Sequential rewritten;
  const auto names = model->named_children().keys();
  size_t index = 0;
  for (const auto& layer : *model) {  // AnyModule: keeps each layer's forward()
    const std::string& name = names[index++];
    if (auto* bn = layer.ptr()->as<torch::nn::BatchNorm2d>()) {
      const int64_t channels = bn->options.num_features();
      int64_t groups = 8;  // as cnn-gn; fewer when the channels do not split into 8
      while (channels % groups != 0)
        groups /= 2;
      rewritten->push_back(std::string(name), torch::nn::GroupNorm(groups, channels));
    } else {
      rewritten->push_back(std::string(name), layer);
    }
  }
  return rewritten;
}

int64_t parameter_count(torch::nn::Module& model) {
  int64_t count = 0;
  for (const auto& p : model.parameters())
    count += p.numel();
  return count;
}

torch::Device model_device(const torch::nn::Module& model) {
  for (const auto& p : model.parameters())
    return p.device();
  for (const auto& b : model.buffers())
    return b.device();
  return torch::Device(torch::kCPU);
}

}  // namespace bigbatch
