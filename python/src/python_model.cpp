#include "python_model.h"

#include <torch/extension.h>

#include <utility>

#include "core/error.h"
#include "memory/tracking_allocator.h"
#include "models/user_forward_layer.h"

namespace py = pybind11;

namespace bigbatch {

namespace {

// The layer name inside the Sequential that calls the module: not a Python identifier, so no
// submodule of the user's module can carry it.
constexpr const char* kForwardLayer = "python-forward";

// The first line of a Python exception ("ValueError: ..."), without its traceback.
std::string first_line(const py::error_already_set& e) {
  const std::string message = e.what();
  return message.substr(0, message.find('\n'));
}

// The state_dict's tensors (keep_vars: the module's own), parameters apart from buffers, each
// under every name it has (a tied weight twice). A torch.compile'd module's are those of the
// module it compiled (the same tensors), named as that module names them, without "_orig_mod.".
std::pair<NamedTensorList, NamedTensorList> module_state(const py::object& compiled_or_not) {
  const py::object module = py::getattr(compiled_or_not, "_orig_mod", compiled_or_not);
  const py::object parameter_type = py::module_::import("torch.nn").attr("Parameter");
  const py::object tensor_type = py::module_::import("torch").attr("Tensor");
  NamedTensorList parameters, buffers;
  const py::dict state = module.attr("state_dict")(py::arg("keep_vars") = true);
  for (const auto& [key, value] : state) {
    if (!py::isinstance(value, tensor_type))
      continue;  // a module's extra state (get_extra_state) is no tensor the engine trains
    auto& list = py::isinstance(value, parameter_type) ? parameters : buffers;
    list.emplace_back(key.cast<std::string>(), value.cast<torch::Tensor>());
  }
  return {std::move(parameters), std::move(buffers)};
}

}  // namespace

std::shared_ptr<PythonModule> share_python_module(PythonModule module) {
  return std::shared_ptr<PythonModule>(new PythonModule(std::move(module)), [](PythonModule* m) {
    py::gil_scoped_acquire gil;  // the engine drops its model without the GIL
    delete m;
  });
}

// The layer of the Sequential: calls the user's module in Python.
class PythonForwardImpl : public UserForwardLayer {
 public:
  explicit PythonForwardImpl(std::shared_ptr<PythonModule> module) : module_(std::move(module)) {}

  const PythonModule& module() const { return *module_; }

  torch::Tensor forward(torch::Tensor inputs) {
    if (module_->computes_loss) {
      throw Error(ErrorKind::Model,
                  "model '" + module_->name +
                      "' computes its own loss (forward(inputs, targets)), so it gives no logits",
                  "predicting and sampling need a module whose forward(inputs) returns outputs "
                  "(its loss can be given beside it: loss=fn)");
    }
    return call("forward()", inputs, [&] { return logits_of(run_module(inputs)); });
  }

  ScoredLoss forward_and_loss(const torch::Tensor& inputs, const torch::Tensor& targets) {
    py::gil_scoped_acquire gil;
    const py::object outputs = call("forward()", inputs, [&] { return run_module(inputs); });
    ScoredLoss scored;
    scored.logits = call("forward()", inputs, [&] { return logits_of(outputs); });
    const py::object loss =
        call("the loss function", inputs, [&] { return module_->loss(outputs, targets); });
    const bool tensor = THPVariable_Check(loss.ptr());
    scored.loss_sum = checked_summed_loss(
        module_->name, tensor ? loss.cast<torch::Tensor>() : torch::Tensor(),
        tensor ? "" : std::string(py::str(py::type::of(loss).attr("__name__"))));
    return scored;
  }

  ModuleLoss forward_loss(const torch::Tensor& inputs, const torch::Tensor& targets) {
    py::gil_scoped_acquire gil;
    const py::object out =
        call("forward()", inputs, [&] { return module_->module(inputs, targets); });
    ReturnedOwnLoss returned;
    returned.one_tensor = THPVariable_Check(out.ptr());
    returned.pair = py::isinstance<py::tuple>(out) && py::len(out) == 2;
    returned.kind = py::str(py::type::of(out).attr("__name__"));
    if (returned.pair) {
      const py::tuple parts = out;
      if (THPVariable_Check(parts[0].ptr()))
        returned.loss_sum = parts[0].cast<torch::Tensor>();
      if (py::isinstance<py::int_>(parts[1]) && !py::isinstance<py::bool_>(parts[1])) {
        returned.items = parts[1].cast<int64_t>();
      } else if (THPVariable_Check(parts[1].ptr())) {
        const torch::Tensor items = parts[1].cast<torch::Tensor>();
        if (items.numel() == 1 && !items.is_floating_point())
          returned.items = items.item<int64_t>();
      }
    }
    return checked_own_loss(module_->name, returned);
  }

  void set_module_mode(bool training) override {
    py::gil_scoped_acquire gil;
    module_->module.attr("train")(training);
  }
  void put_in_eval(LayerKind kind) override {
    py::gil_scoped_acquire gil;
    for (const py::handle item : module_->module.attr("named_modules")()) {
      const py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      if (is_layer_of(pair[1], kind))
        pair[1].attr("eval")();
    }
  }

  std::vector<std::string> layers_of(LayerKind kind, bool training_only) const {
    py::gil_scoped_acquire gil;
    std::vector<std::string> names;
    for (const py::handle item : module_->module.attr("named_modules")()) {
      const py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      if (is_layer_of(pair[1], kind) && (!training_only || pair[1].attr("training").cast<bool>()))
        names.push_back(pair[0].cast<std::string>());
    }
    return names;
  }

 private:
  // By torch.nn's base classes: _BatchNorm (BatchNorm1d/2d/3d, SyncBatchNorm) and _DropoutNd
  // (every dropout), the latter only where its p is above 0.
  static bool is_layer_of(const py::handle layer, LayerKind kind) {
    switch (kind) {
      case LayerKind::BatchNorm:
        return py::isinstance(layer,
                              py::module_::import("torch.nn.modules.batchnorm").attr("_BatchNorm"));
      case LayerKind::Dropout:
        return py::isinstance(layer,
                              py::module_::import("torch.nn.modules.dropout").attr("_DropoutNd")) &&
               layer.attr("p").cast<double>() > 0;
    }
    return false;
  }

  // The module on a batch's inputs: itself, or what inputs_of gathers for them (a dict as
  // keyword arguments).
  py::object run_module(const torch::Tensor& inputs) const {
    if (module_->inputs_of.is_none())
      return module_->module(inputs);
    const py::object batch = module_->inputs_of(inputs);
    if (py::isinstance<py::dict>(batch))
      return module_->module(**batch);
    return module_->module(batch);
  }

  // The outputs the task scores in what forward returned: a tensor, the first element of a tuple
  // or list (a module that also returns hidden states), or `.logits` (a Hugging Face model's
  // output, or a dict that holds them).
  torch::Tensor logits_of(const py::object& out) const {
    if (THPVariable_Check(out.ptr()))
      return out.cast<torch::Tensor>();
    if ((py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) && py::len(out) > 0 &&
        THPVariable_Check(out[py::int_(0)].ptr()))
      return out[py::int_(0)].cast<torch::Tensor>();
    if (py::hasattr(out, "logits") && THPVariable_Check(out.attr("logits").ptr()))
      return out.attr("logits").cast<torch::Tensor>();
    if (py::isinstance<py::dict>(out) && out.contains("logits") &&
        THPVariable_Check(out["logits"].ptr()))
      return out["logits"].cast<torch::Tensor>();
    throw Error(ErrorKind::Model,
                "model '" + module_->name + "' forward() returned a " +
                    std::string(py::str(py::type::of(out).attr("__name__"))) +
                    ", not a tensor of outputs",
                "return the outputs (logits), a tuple that starts with them, or an object with "
                ".logits: [batch, classes] for classes, [batch, tokens, vocabulary] for token "
                "sequences (docs/python.md)");
  }

  // Runs `body` with the GIL; Python's exceptions in the user's code become one line naming the
  // module, except an out-of-memory (made one again, so the trainer backs off) and a
  // KeyboardInterrupt (Python's own again when it leaves the engine).
  template <typename Body>
  auto call(const char* what, const torch::Tensor& inputs, Body&& body) const -> decltype(body()) {
    const int64_t refused_before = memory_counters().refused_allocations;
    py::gil_scoped_acquire gil;
    try {
      return body();
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_KeyboardInterrupt))
        throw;
      const std::string summary = first_line(e);
      if (memory_counters().refused_allocations != refused_before ||
          summary.find("out of memory") != std::string::npos) {
        C10_THROW_ERROR(OutOfMemoryError, summary);
      }
      throw Error(ErrorKind::Model,
                  "model '" + module_->name + "' failed in " + what + " on inputs " +
                      describe_inputs(inputs) + ": " + summary,
                  "run the module on the same inputs in Python to see where");
    }
  }

  std::shared_ptr<PythonModule> module_;
};

PythonModelImpl::PythonModelImpl(PythonModule module, const NamedTensorList& parameters,
                                 const NamedTensorList& buffers) {
  const bool training = [&] {
    py::gil_scoped_acquire gil;
    return module.module.attr("training").cast<bool>();
  }();
  forward_ = std::make_shared<PythonForwardImpl>(share_python_module(std::move(module)));
  push_back(kForwardLayer, forward_);
  register_state(parameters, buffers);
  torch::nn::Module::train(training);
}

PythonModelImpl::~PythonModelImpl() = default;

const std::string& PythonModelImpl::name() const {
  return forward_->module().name;
}

bool PythonModelImpl::computes_loss() const {
  return forward_->module().computes_loss;
}

bool PythonModelImpl::has_loss_method() const {
  py::gil_scoped_acquire gil;
  return !forward_->module().loss.is_none();
}

ModuleLoss PythonModelImpl::forward_loss(const torch::Tensor& inputs,
                                         const torch::Tensor& targets) {
  return forward_->forward_loss(inputs, targets);
}

ScoredLoss PythonModelImpl::forward_and_loss(const torch::Tensor& inputs,
                                             const torch::Tensor& targets) {
  return forward_->forward_and_loss(inputs, targets);
}

std::vector<std::string> PythonModelImpl::layers_of(LayerKind kind, bool training_only) const {
  return forward_->layers_of(kind, training_only);
}

void PythonModelImpl::freeze(LayerKind kind) {
  forward_->freeze(kind);
}

std::shared_ptr<torch::nn::Module> PythonModelImpl::clone(
    const c10::optional<torch::Device>& device) const {
  py::gil_scoped_acquire gil;
  const PythonModule& original = forward_->module();
  PythonModule copy = original;
  {
    // Without gradient tracking: the copies are leaves of their own.
    torch::NoGradGuard no_grad;
    copy.module = py::module_::import("copy").attr("deepcopy")(original.module);
  }
  if (device)
    copy.module.attr("to")(py::str(device->str()));
  copy.module.attr("train")(is_training());
  const auto [parameters, buffers] = module_state(copy.module);
  auto model = std::make_shared<PythonModelImpl>(std::move(copy), parameters, buffers);
  for (const LayerKind kind : forward_->frozen())
    model->freeze(kind);
  return model;
}

torch::nn::Sequential python_model(const PythonModule& module) {
  py::gil_scoped_acquire gil;
  const auto [parameters, buffers] = module_state(module.module);
  auto model = std::make_shared<PythonModelImpl>(module, parameters, buffers);
  // As its base type: the holder would otherwise wrap it as the first layer of a new one.
  return torch::nn::Sequential(std::shared_ptr<torch::nn::SequentialImpl>(model));
}

torch::nn::Sequential python_model_copy(const PythonModule& module) {
  auto model = python_model(module);
  return torch::nn::Sequential(
      std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
}

}  // namespace bigbatch
