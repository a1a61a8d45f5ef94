#include "models/scripted_model.h"

#include <torch/script.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "io/zip_archive.h"
#include "memory/tracking_allocator.h"
#include "models/models.h"
#include "models/user_forward_layer.h"

namespace bigbatch {

namespace {

// The part of a libtorch or TorchScript message a user needs: an error raised inside scripted
// code ends with the Python exception ("RuntimeError: ...") after two tracebacks; other errors
// start with their message, followed by a C++ backtrace.
std::string error_summary(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string message = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (message.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
      message.pop_back();
    message = message.substr(message.rfind('\n') + 1);
    if (message.rfind("builtins.", 0) == 0)
      message = message.substr(9);
    return message;
  }
  // The loader's own reason: its first line with words in it (an unknown operator's message
  // starts with a blank line).
  for (const std::string& line : split(message, '\n')) {
    if (!trim(line).empty())
      return trim(line);
  }
  return "no reason given";
}

// A loader error of a file that uses what this libtorch does not have: an operator, a schema or
// a type that a newer PyTorch added.
bool unknown_to_this_libtorch(const std::string& reason) {
  for (const char* sign : {"Unknown builtin op", "Unknown type name", "Unknown type constructor",
                           "Arguments for call are not valid"}) {
    if (reason.find(sign) != std::string::npos)
      return true;
  }
  return false;
}

std::string type_name(const torch::jit::Module& module) {
  const auto name = module.type()->name();
  return name ? name->name() : "";  // "BatchNorm2d" from __torch__...batchnorm.BatchNorm2d
}

// A scripted module's float `p`: an attribute, or a constant (nn.Dropout declares it one).
std::optional<double> probability_of(const torch::jit::Module& module) {
  if (module.hasattr("p") && module.attr("p").isDouble())
    return module.attr("p").toDouble();
  const auto& type = module.type();
  if (type->hasConstant("p") && type->getConstant("p").isDouble())
    return type->getConstant("p").toDouble();
  return std::nullopt;
}

bool is_layer_of(const torch::jit::Module& module, LayerKind kind) {
  const std::string type = type_name(module);
  switch (kind) {
    case LayerKind::BatchNorm:
      return type.rfind("BatchNorm", 0) == 0 || type == "SyncBatchNorm";
    case LayerKind::Dropout: {
      // Dropout, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout; one whose p is 0 draws
      // nothing.
      if (type.find("Dropout") == std::string::npos)
        return false;
      const std::optional<double> p = probability_of(module);
      return !p || *p > 0;
    }
  }
  return false;
}

// The layer name inside the Sequential that runs forward(): not a Python identifier, so no
// submodule of the user's module can carry it.
constexpr const char* kForwardLayer = "torchscript-forward";

}  // namespace

// The layer of the Sequential: runs the module's forward() on the inputs.
class ScriptedForwardImpl : public UserForwardLayer {
 public:
  ScriptedForwardImpl(std::shared_ptr<torch::jit::Module> module, std::string path)
      : module_(std::move(module)), path_(std::move(path)) {}

  torch::Tensor forward(torch::Tensor inputs) {
    if (computes_loss_) {
      throw Error(ErrorKind::Model,
                  "model '" + path_ +
                      "' computes its own loss (forward(inputs, targets)), so it "
                      "gives no logits",
                  "predicting and sampling need a module whose forward(inputs) returns logits "
                  "(its loss can be a loss(outputs, targets) method beside it)");
    }
    return logits_of(call("forward", {inputs}, inputs));
  }

  ScoredLoss forward_and_loss(const torch::Tensor& inputs, const torch::Tensor& targets) {
    const c10::IValue outputs = call("forward", {inputs}, inputs);
    ScoredLoss scored;
    scored.logits = logits_of(outputs);
    const c10::IValue loss = call("loss", {outputs, targets}, inputs);
    scored.loss_sum =
        checked_summed_loss(path_, loss.isTensor() ? loss.toTensor() : torch::Tensor(),
                            loss.isTensor() ? "" : std::string(loss.tagKind()));
    return scored;
  }

  ModuleLoss forward_loss(const torch::Tensor& inputs, const torch::Tensor& targets) {
    const c10::IValue out = call("forward", {inputs, targets}, inputs);
    ReturnedOwnLoss returned;
    returned.one_tensor = out.isTensor();
    returned.pair = out.isTuple() && out.toTupleRef().elements().size() == 2;
    returned.kind = out.tagKind();
    if (returned.pair) {
      const auto& parts = out.toTupleRef().elements();
      if (parts[0].isTensor())
        returned.loss_sum = parts[0].toTensor();
      if (parts[1].isInt())
        returned.items = parts[1].toInt();
      else if (parts[1].isTensor() && parts[1].toTensor().numel() == 1 &&
               !parts[1].toTensor().is_floating_point())
        returned.items = parts[1].toTensor().item<int64_t>();
    }
    return checked_own_loss(path_, returned);
  }

  void set_computes_loss(bool on) { computes_loss_ = on; }

  void set_module_mode(bool training) override { module_->train(training); }
  void put_in_eval(LayerKind kind) override {
    for (const auto& item : module_->named_modules()) {
      if (is_layer_of(item.value, kind))
        torch::jit::Module(item.value).eval();
    }
  }

 private:
  // The logits in what forward() returned: the tensor itself, or the first element of a tuple
  // (a module that also returns hidden states or auxiliary outputs, as many do).
  torch::Tensor logits_of(const c10::IValue& out) const {
    if (out.isTensor())
      return out.toTensor();
    if (out.isTuple() && !out.toTupleRef().elements().empty() &&
        out.toTupleRef().elements()[0].isTensor())
      return out.toTupleRef().elements()[0].toTensor();
    throw Error(ErrorKind::Model,
                "model '" + path_ + "' forward() returned " + out.tagKind() +
                    (out.isTuple() ? " that does not start with a tensor" : "") +
                    ", not a tensor of logits",
                "return the logits, or a tuple that starts with them: [batch, classes] for "
                "images, [batch, tokens, vocabulary] for token sequences (docs/your-model.md)");
  }

  // Runs the module's `method` on `arguments`; errors inside the module become one line naming
  // it, the method and the inputs, except an out-of-memory, which stays one.
  c10::IValue call(const char* method, std::vector<c10::IValue> arguments,
                   const torch::Tensor& inputs) {
    const int64_t refused_before = memory_counters().refused_allocations;
    try {
      if (std::string(method) == "forward")
        return module_->forward(std::move(arguments));
      return module_->get_method(method)(std::move(arguments));
    } catch (const c10::OutOfMemoryError&) {
      throw;  // the trainer backs off: a smaller micro-batch, the same update
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // The interpreter rewraps an out-of-memory as a runtime error: made one again here, so
      // that the trainer backs off as it does for the built-in models.
      const std::string summary = error_summary(e);
      if (memory_counters().refused_allocations != refused_before ||
          summary.find("out of memory") != std::string::npos) {
        C10_THROW_ERROR(OutOfMemoryError, summary);
      }
      // Errors raised inside scripted code: the user's module, named with its own message.
      throw Error(ErrorKind::Model,
                  "model '" + path_ + "' failed in " + method + "() on inputs " +
                      describe_inputs(inputs) + ": " + summary,
                  "run the module on the same inputs in Python to see where");
    }
  }

  std::shared_ptr<torch::jit::Module> module_;
  std::string path_;
  bool computes_loss_ = false;
};

ScriptedModelImpl::ScriptedModelImpl(torch::jit::Module module, std::string path)
    : module_(std::make_shared<torch::jit::Module>(std::move(module))), path_(std::move(path)) {
  forward_ = std::make_shared<ScriptedForwardImpl>(module_, path_);
  // forward(self, inputs) gives logits; forward(self, inputs, targets) the loss itself.
  const auto forward = module_->find_method("forward");
  computes_loss_ = forward && forward->function().getSchema().arguments().size() == 3;
  has_loss_method_ = module_->find_method("loss").has_value();
  forward_->set_computes_loss(computes_loss_);
  push_back(kForwardLayer, forward_);
  register_scripted_state();
  torch::nn::Module::train(module_->is_training());
}

ScriptedModelImpl::~ScriptedModelImpl() = default;

void ScriptedModelImpl::register_scripted_state() {
  NamedTensorList parameters, buffers;
  for (const auto& item : module_->named_parameters(/*recurse=*/true))
    parameters.emplace_back(item.name, item.value);  // a tied tensor under each of its names
  for (const auto& item : module_->named_buffers(/*recurse=*/true))
    buffers.emplace_back(item.name, item.value);
  UserModuleImpl::register_state(parameters, buffers);
}

std::vector<std::string> ScriptedModelImpl::layers_of(LayerKind kind, bool training_only) const {
  std::vector<std::string> names;
  for (const auto& item : module_->named_modules()) {
    if (is_layer_of(item.value, kind) && (!training_only || item.value.is_training()))
      names.push_back(item.name);
  }
  return names;
}

ModuleLoss ScriptedModelImpl::forward_loss(const torch::Tensor& inputs,
                                           const torch::Tensor& targets) {
  return forward_->forward_loss(inputs, targets);
}

ScoredLoss ScriptedModelImpl::forward_and_loss(const torch::Tensor& inputs,
                                               const torch::Tensor& targets) {
  return forward_->forward_and_loss(inputs, targets);
}

void ScriptedModelImpl::freeze(LayerKind kind) {
  forward_->freeze(kind);
}

void ScriptedModelImpl::save_module(const std::string& path) const {
  std::ostringstream bytes;
  module_->save(bytes);
  atomic_write_file(path, bytes.str(), Links::Replace);  // the run directory's model.pt
}

std::shared_ptr<torch::nn::Module> ScriptedModelImpl::clone(
    const c10::optional<torch::Device>& device) const {
  // libtorch 1.13's deepcopy() copies parameters through autograd: the copies are not leaves,
  // and a backward pass through the copy accumulates into the original's .grad. Copied
  // without gradient tracking, they are leaves of their own again.
  torch::jit::Module copy;
  {
    torch::NoGradGuard no_grad;
    copy = module_->deepcopy();
  }
  std::map<std::string, bool> trainable;
  for (const auto& item : module_->named_parameters(/*recurse=*/true))
    trainable[item.name] = item.value.requires_grad();
  for (const auto& item : copy.named_parameters(/*recurse=*/true))
    item.value.requires_grad_(trainable[item.name]);
  if (device)
    copy.to(*device);
  copy.train(is_training());
  auto model = std::make_shared<ScriptedModelImpl>(std::move(copy), path_);
  for (const LayerKind kind : forward_->frozen())
    model->freeze(kind);
  return model;
}

void check_model_file_exists(const std::string& path) {
  if (!path_exists(path)) {
    throw Error(ErrorKind::Model, "model file '" + path + "' does not exist",
                "save one in Python with torch.jit.script(model).save('" + path +
                    "') (docs/your-model.md)");
  }
}

std::shared_ptr<ScriptedModelImpl> load_scripted_model(const std::string& path) {
  check_model_file_exists(path);
  // The profiling executor's first calls are slow (a transformer's first takes 0.5 s more),
  // it holds ~100 MB more and from its second call on draws dropout's random numbers in another
  // order than eager PyTorch; without it training measured no slower
  // (../shared/LIBTORCH_NOTES.md).
  // BIGBATCH_TORCHSCRIPT_OPTIMIZE=1 turns it on, for measuring (bench/scripted_bench.py).
  const char* optimize = std::getenv("BIGBATCH_TORCHSCRIPT_OPTIMIZE");
  torch::jit::setGraphExecutorOptimize(optimize != nullptr && std::string(optimize) == "1");
  // PyTorch's loader reads its zip without checking the members' CRC-32s: a file damaged on
  // disk or in transfer would load and train with whatever the damage made of it.
  try {
    check_zip_intact(read_text_file(path));
  } catch (const ZipError& e) {
    const std::string what = e.what();
    if (what.rfind("is not a zip archive", 0) != 0) {  // not a zip: the loader says what it is
      throw Error(ErrorKind::Model, "model file '" + path + "' " + what,
                  "it changed after PyTorch saved it: save it again with "
                  "torch.jit.script(model).save(...) or copy it again");
    }
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& e) {
    const std::string reason = error_summary(e);
    if (unknown_to_this_libtorch(reason)) {
      throw Error(ErrorKind::Model,
                  "model file '" + path + "' does not load in bigbatch's " +
                      libtorch_description() + " (" + reason +
                      "): it was likely written by a newer PyTorch",
                  "build bigbatch against the PyTorch that saved it: scripts/setup.sh --pytorch "
                  "python3 (docs/your-model.md), or bigbatch from Python (docs/python.md)");
    }
    throw Error(ErrorKind::Model,
                "model file '" + path + "' is not a TorchScript module that " +
                    libtorch_description() + " loads (" + reason + ")",
                "save it in Python with torch.jit.script(model).save(...); a state_dict or a "
                "pickled model cannot be trained without its code");
  }
  const auto forward = module.find_method("forward");
  if (!forward) {
    throw Error(ErrorKind::Model, "model '" + path + "' has no forward() method",
                "script an nn.Module whose forward(inputs) returns logits");
  }
  const auto& arguments = forward->function().getSchema().arguments();
  if (arguments.size() != 2 && arguments.size() != 3) {  // self, inputs[, targets]
    std::string names;
    for (size_t i = 1; i < arguments.size(); ++i)
      names += (names.empty() ? "" : ", ") + arguments[i].name();
    throw Error(ErrorKind::Model,
                "model '" + path + "' forward() takes (" + names +
                    "); bigbatch calls forward(inputs), which returns logits, or "
                    "forward(inputs, targets), which returns (loss_sum, item_count)",
                "make forward take the inputs alone and return logits, and bigbatch computes the "
                "summed loss itself (docs/your-model.md)");
  }
  if (const auto loss = module.find_method("loss")) {
    const size_t loss_arguments = loss->function().getSchema().arguments().size();
    if (arguments.size() == 3) {
      throw Error(ErrorKind::Model,
                  "model '" + path +
                      "' computes its loss twice: in forward(inputs, targets) and "
                      "in loss()",
                  "keep one: forward(inputs) -> logits with loss(outputs, targets), or "
                  "forward(inputs, targets) -> (loss_sum, item_count) (docs/your-model.md)");
    }
    if (loss_arguments != 3) {  // self, outputs, targets
      throw Error(ErrorKind::Model,
                  "model '" + path + "' loss() takes " + std::to_string(loss_arguments - 1) +
                      " argument(s); bigbatch calls loss(outputs, targets) with what forward "
                      "returned and the targets",
                  "define @torch.jit.export def loss(self, outputs, targets) returning the "
                  "summed loss (docs/your-model.md)");
    }
  }
  auto model = std::make_shared<ScriptedModelImpl>(std::move(module), path);
  if (model->parameters().empty()) {
    throw Error(ErrorKind::Model, "model '" + path + "' has no parameters to train",
                "script the module in training form (torch.jit.script, not torch.jit.freeze)");
  }
  return model;
}

ScriptedModelImpl* as_scripted(torch::nn::Module& model) {
  return dynamic_cast<ScriptedModelImpl*>(&model);
}

}  // namespace bigbatch
