#pragma once
// `bigbatch sample`: text from a trained language-model run, so a user sees what the model
// learnt. The run's config.toml rebuilds the model, its weights.safetensors fill it; the prompt
// is tokenised by the run's tokenizer after an end-of-text (as every training document
// starts), and tokens are
// drawn one at a time from the softmax of the last position's logits at `temperature`, among
// the `top_k` most likely (0: all), until `tokens` are drawn or end-of-text is.
//
//   SampleOptions options;
//   options.run_dir = "runs/lm";  options.prompt = "Q: ";  options.tokens = 200;
//   std::string text = sample_text(options);   // the prompt and what followed it
#include <cstdint>
#include <string>

namespace bigbatch {

struct SampleOptions {
  std::string run_dir;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 0;
  uint64_t seed = 42;
  std::string device = "cpu";  // --device: where the model computes (the draws stay the CPU's)
};

struct SampleResult {
  std::string text;    // the prompt and the text drawn after it
  int64_t drawn = 0;   // tokens drawn
  bool ended = false;  // the model ended the document (end-of-text)
};

SampleResult sample_text(const SampleOptions& options);

}  // namespace bigbatch
