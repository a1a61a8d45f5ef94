#include "models/user_module.h"

#include <map>

#include "core/error.h"

namespace bigbatch {

namespace {

// An empty module that holds the registered state of one submodule of the user's module, so
// that its names nest as they do in the module's state_dict.
class StateNode : public torch::nn::Module {
 public:
  using torch::nn::Module::register_buffer;
  using torch::nn::Module::register_module;
  using torch::nn::Module::register_parameter;
};

// libtorch's message without its C++ backtrace.
std::string first_line(const c10::Error& e) {
  const std::string message = e.what_without_backtrace();
  return message.substr(0, message.find('\n'));
}

}  // namespace

void UserModuleImpl::register_state(const NamedTensorList& parameters,
                                    const NamedTensorList& buffers) {
  // Each name's owner: this for top-level names, a StateNode per submodule below.
  std::map<std::string, std::shared_ptr<StateNode>> nodes;
  auto owner_of = [&](const std::string& name, std::string& leaf) -> torch::nn::Module& {
    const size_t dot = name.rfind('.');
    leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    if (dot == std::string::npos)
      return *this;
    torch::nn::Module* parent = this;
    std::string prefix;
    size_t begin = 0;
    while (begin <= dot) {
      const size_t end = name.find('.', begin);
      const std::string part = name.substr(begin, end - begin);
      prefix += (prefix.empty() ? "" : ".") + part;
      auto& node = nodes[prefix];
      if (!node) {
        node = std::make_shared<StateNode>();
        if (parent == this)
          register_module(part, node);
        else
          static_cast<StateNode*>(parent)->register_module(part, node);
      }
      parent = node.get();
      begin = end + 1;
    }
    return *parent;
  };
  auto add = [&](const std::string& name, const torch::Tensor& tensor, bool parameter) {
    std::string leaf;
    torch::nn::Module& owner = owner_of(name, leaf);
    if (&owner == this) {
      if (parameter)
        register_parameter(leaf, tensor, tensor.requires_grad());
      else
        register_buffer(leaf, tensor);
      return;
    }
    auto& node = static_cast<StateNode&>(owner);
    if (parameter)
      node.register_parameter(leaf, tensor, tensor.requires_grad());
    else
      node.register_buffer(leaf, tensor);
  };

  std::map<const c10::TensorImpl*, std::string> first_name;
  for (const auto& [name, tensor] : parameters) {
    const auto [it, fresh] = first_name.emplace(tensor.unsafeGetTensorImpl(), name);
    if (fresh) {
      add(name, tensor, /*parameter=*/true);
    } else {
      aliases_.emplace_back(name, it->second);
      add(name, tensor, /*parameter=*/false);
    }
  }
  for (const auto& [name, tensor] : buffers)
    add(name, tensor, /*parameter=*/false);
}

ModuleLoss checked_own_loss(const std::string& name, const ReturnedOwnLoss& returned) {
  const std::string contract =
      "return (loss_sum, item_count): the loss summed over the micro-batch's items, and their "
      "count (docs/your-model.md)";
  if (returned.one_tensor) {
    throw Error(ErrorKind::Model,
                "model '" + name +
                    "' forward(inputs, targets) returned one tensor: a loss "
                    "averaged over a micro-batch cannot be made the mean over the whole update "
                    "(small micro-batches and short sequences would weigh more)",
                contract);
  }
  if (!returned.pair) {
    throw Error(ErrorKind::Model,
                "model '" + name + "' forward(inputs, targets) returned " + returned.kind +
                    ", not (loss_sum, item_count)",
                contract);
  }
  const torch::Tensor& loss_sum = returned.loss_sum;
  if (!loss_sum.defined() || loss_sum.dim() != 0 || !loss_sum.is_floating_point()) {
    throw Error(ErrorKind::Model,
                "model '" + name + "' forward(inputs, targets) returned a loss_sum that is " +
                    "not a floating-point scalar tensor",
                contract);
  }
  if (!returned.items) {
    throw Error(ErrorKind::Model,
                "model '" + name + "' forward(inputs, targets) returned an item_count that is " +
                    "not an integer",
                "count the items the loss was summed over as an int or an integer tensor");
  }
  if (*returned.items < 0) {
    throw Error(ErrorKind::Model,
                "model '" + name + "' returned a negative item_count (" +
                    std::to_string(*returned.items) + ")",
                contract);
  }
  return {loss_sum, *returned.items};
}

torch::Tensor checked_summed_loss(const std::string& name, const torch::Tensor& loss,
                                  const std::string& kind) {
  if (loss.defined() && loss.dim() == 0 && loss.is_floating_point())
    return loss;
  throw Error(ErrorKind::Model,
              "model '" + name + "' loss(outputs, targets) returned " +
                  (loss.defined() ? "a tensor of shape " + c10::str(loss.sizes()) + " " +
                                        c10::toString(loss.scalar_type())
                                  : kind) +
                  ", not the summed loss as a floating-point scalar tensor",
              "return the loss summed over the batch's items (reduction='sum'); bigbatch "
              "counts the items itself (docs/your-model.md)");
}

std::string describe_inputs(const torch::Tensor& inputs) {
  const std::string text = c10::str(inputs.sizes()) + " ";
  switch (inputs.scalar_type()) {
    case torch::kFloat32:
      return text + "float32";
    case torch::kFloat64:
      return text + "float64";
    case torch::kInt64:
      return text + "int64 token ids";
    default:
      return text + c10::toString(inputs.scalar_type());
  }
}

UserModuleImpl* as_user_module(torch::nn::Module& model) {
  return dynamic_cast<UserModuleImpl*>(&model);
}

bool computes_own_loss(torch::nn::Module& model) {
  const auto* module = as_user_module(model);
  return module && module->computes_loss();
}

void backward_through(torch::nn::Module& model, const torch::Tensor& loss,
                      const torch::Tensor& seed) {
  try {
    if (seed.defined())
      loss.backward(seed);
    else
      loss.backward();
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the trainer backs off
  } catch (const c10::Error& e) {
    const UserModuleImpl* module = as_user_module(model);
    const std::string message = first_line(e);
    // Autograd's version check: forward saved a tensor for backward, then wrote into it. The
    // batch is the module's own copy, so only the module can have written it.
    if (module == nullptr || message.find("modified by an inplace operation") == std::string::npos)
      throw;
    throw Error(ErrorKind::Model,
                "model '" + module->name() +
                    "' wrote in place into a tensor its backward needs (its inputs or targets, "
                    "e.g. y.fill_(0) or tokens.zero_() after use): " +
                    message,
                "compute out of place, or on a copy (x = x.clone()), as PyTorch requires of the "
                "same module (docs/your-model.md)");
  }
}

}  // namespace bigbatch
