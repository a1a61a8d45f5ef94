#include "io/safetensors.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "io/safetensors_format.h"

namespace bigbatch {

namespace {

DType to_dtype(torch::ScalarType type, const std::string& name) {
  switch (type) {
    case torch::kFloat64:
      return DType::F64;
    case torch::kFloat32:
      return DType::F32;
    case torch::kFloat16:
      return DType::F16;
    case torch::kBFloat16:
      return DType::BF16;
    case torch::kInt64:
      return DType::I64;
    case torch::kInt32:
      return DType::I32;
    case torch::kInt16:
      return DType::I16;
    case torch::kInt8:
      return DType::I8;
    case torch::kUInt8:
      return DType::U8;
    case torch::kBool:
      return DType::Bool;
    default:
      BB_INTERNAL_ASSERT(false, "tensor " + name + " has a dtype safetensors cannot hold");
  }
}

torch::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return torch::kFloat64;
    case DType::F32:
      return torch::kFloat32;
    case DType::F16:
      return torch::kFloat16;
    case DType::BF16:
      return torch::kBFloat16;
    case DType::I64:
      return torch::kInt64;
    case DType::I32:
      return torch::kInt32;
    case DType::I16:
      return torch::kInt16;
    case DType::I8:
      return torch::kInt8;
    case DType::U8:
      return torch::kUInt8;
    case DType::Bool:
      return torch::kBool;
  }
  return torch::kFloat32;
}

std::string shape_text(at::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

NamedTensors model_state(torch::nn::Module& model) {
  NamedTensors state;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    state.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true))
    state.emplace_back(item.key(), item.value());
  return state;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, Links links) {
  std::vector<TensorEntry> entries;
  std::vector<torch::Tensor> contiguous;
  for (const auto& [name, tensor] : tensors) {
    // The format is little-endian host memory; this writes CPU copies of device tensors.
    auto host = tensor.detach().to(torch::kCPU).contiguous();
    TensorEntry entry;
    entry.name = name;
    entry.dtype = to_dtype(host.scalar_type(), name);
    entry.shape = host.sizes().vec();
    entries.push_back(entry);
    contiguous.push_back(host);
  }
  std::string content = build_safetensors_header(entries, metadata);
  for (const auto& t : contiguous) {
    content.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  atomic_write_file(path, content, links);
}

NamedTensors load_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata) {
  if (!path_exists(path)) {
    throw Error(ErrorKind::Format, "weights file '" + path + "' does not exist", "check the path");
  }
  const std::string bytes = read_text_file(path);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const SafetensorsHeader header = parse_safetensors_header(data, bytes.size(), path);
  NamedTensors tensors;
  for (const auto& entry : header.tensors) {
    auto tensor =
        torch::empty(entry.shape, torch::TensorOptions().dtype(to_scalar_type(entry.dtype)));
    std::memcpy(tensor.data_ptr(), data + header.data_offset + entry.begin,
                entry.end - entry.begin);
    tensors.emplace_back(entry.name, tensor);
  }
  if (metadata)
    *metadata = header.metadata;
  return tensors;
}

void save_weights(const std::string& path, torch::nn::Module& model,
                  const std::map<std::string, std::string>& metadata, Links links) {
  save_safetensors(path, model_state(model), metadata, links);
}

void load_weights(const std::string& path, torch::nn::Module& model) {
  const NamedTensors loaded = load_safetensors(path);
  const NamedTensors target = model_state(model);
  std::map<std::string, torch::Tensor> by_name(loaded.begin(), loaded.end());
  // Check everything before copying anything, so a bad file leaves the model untouched.
  for (const auto& [name, tensor] : target) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw Error(ErrorKind::Format, "weights file '" + path + "' has no tensor '" + name + "'",
                  "it was saved from another model; check --model and its shape (--hidden; "
                  "--layers, --d-model, --heads, --seq-len for gpt)");
    }
    if (it->second.sizes() != tensor.sizes()) {
      throw Error(ErrorKind::Format,
                  "weights file '" + path + "' gives tensor '" + name + "' shape " +
                      shape_text(it->second.sizes()) + ", the model needs " +
                      shape_text(tensor.sizes()),
                  "it was saved from another model; check --model and its shape (--hidden; "
                  "--layers, --d-model, --heads, --seq-len for gpt)");
    }
    if (it->second.is_floating_point() && !torch::isfinite(it->second).all().item<bool>()) {
      throw Error(
          ErrorKind::Format,
          "weights file '" + path + "' holds NaN or infinite values in tensor '" + name + "'",
          "it comes from a run that diverged; use the weights of an earlier checkpoint");
    }
    const bool both_float = it->second.is_floating_point() && tensor.is_floating_point();
    if (!both_float && it->second.scalar_type() != tensor.scalar_type()) {
      throw Error(ErrorKind::Format,
                  "weights file '" + path + "' gives tensor '" + name + "' dtype " +
                      std::string(c10::toString(it->second.scalar_type())) + ", the model needs " +
                      c10::toString(tensor.scalar_type()),
                  "save the weights with matching dtypes");
    }
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    throw Error(ErrorKind::Format,
                "weights file '" + path + "' has tensor '" + by_name.begin()->first +
                    "' that the model lacks",
                "it was saved from another model; check --model and its shape (--hidden; "
                "--layers, --d-model, --heads, --seq-len for gpt)");
  }
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> source(loaded.begin(), loaded.end());
  for (auto& [name, tensor] : target)
    tensor.copy_(source.at(name));
}

}  // namespace bigbatch
