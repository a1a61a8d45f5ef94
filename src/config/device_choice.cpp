#include "config/device_choice.h"

#include <cctype>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {

constexpr const char* kChoices = "cpu, cuda, cuda:N (a device index) or auto";

[[noreturn]] void bad_device(const std::string& text, const std::string& why) {
  throw Error(ErrorKind::Config, "--device '" + text + "' " + why,
              std::string("use --device ") + kChoices);
}

}  // namespace

DeviceChoice DeviceChoice::parse(const std::string& raw) {
  const std::string text = trim(raw);
  if (text == "cpu")
    return {DeviceKind::Cpu, -1};
  if (text == "auto")
    return {DeviceKind::Auto, -1};
  if (text == "cuda")
    return {DeviceKind::Cuda, -1};
  if (text.rfind("cuda:", 0) == 0) {
    const auto index = parse_int(text.substr(5));
    if (!index || *index < 0)
      bad_device(text, "names no device index (cuda:0, cuda:1, ...)");
    return {DeviceKind::Cuda, *index};
  }
  // Near misses get a pointed hint: PyTorch and the launchers spell the GPU "cuda".
  std::string lower = text;
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* other : {"mps", "xpu", "hip", "rocm", "tpu", "xla", "mlu", "npu", "vulkan"}) {
    if (lower == other || lower.rfind(std::string(other) + ":", 0) == 0)
      bad_device(text, "is a device bigbatch does not compute on (it has CPU and CUDA back-ends)");
  }
  std::string meant;
  if (lower != text &&
      (lower == "cpu" || lower == "cuda" || lower == "auto" || lower.rfind("cuda:", 0) == 0))
    meant = lower;
  else if (text == "gpu")
    meant = "cuda";
  else if (text.rfind("gpu:", 0) == 0)
    meant = "cuda:" + text.substr(4);
  else if (text.size() > 4 && text.rfind("cuda", 0) == 0 && parse_int(text.substr(4)))
    meant = "cuda:" + text.substr(4);
  else if (const auto near = closest_match(text, {"cpu", "cuda", "auto"}))
    meant = *near;
  if (!meant.empty())
    bad_device(text, "is not a device: did you mean '" + meant + "'?");
  bad_device(text, "is not a device");
}

std::string DeviceChoice::to_string() const {
  switch (kind) {
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::Auto:
      return "auto";
    case DeviceKind::Cuda:
      return index >= 0 ? "cuda:" + std::to_string(index) : "cuda";
  }
  return "cpu";
}

}  // namespace bigbatch
