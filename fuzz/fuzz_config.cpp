// libFuzzer target: any TOML text either configures a run that validates, or is a
// bigbatch::Error; the rendered configuration must load back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/option_table.h"
#include "config/resolved_run.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  bigbatch::TrainConfig config;
  try {
    bigbatch::load_toml_config_text(config, text, "fuzz.toml");
    config.validate();
    bigbatch::resolve_run(config, 60000, 1);
  } catch (const bigbatch::Error&) {
    return 0;
  }
  const std::string rendered = bigbatch::render_toml_config(config);
  bigbatch::TrainConfig again;
  bigbatch::load_toml_config_text(again, rendered, "rendered.toml");
  if (bigbatch::render_toml_config(again) != rendered)
    std::abort();
  return 0;
}
