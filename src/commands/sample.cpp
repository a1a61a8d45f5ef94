#include "commands/sample.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/text_corpus.h"
#include "device/device.h"
#include "io/safetensors.h"
#include "models/models.h"
#include "models/scripted_model.h"
#include "session/session.h"
#include "train/run_setup.h"

namespace bigbatch {

SampleResult sample_text(const SampleOptions& options) {
  check_config(options.tokens >= 0, "--tokens must be zero or positive", "e.g. --tokens 200");
  check_config(options.temperature > 0, "--temperature must be positive",
               "e.g. --temperature 0.8 (lower: surer, higher: more varied)");
  check_config(options.top_k >= 0, "--top-k must be zero (all tokens) or positive",
               "e.g. --top-k 40");
  const DeviceChoice device_choice = DeviceChoice::parse(options.device);
  // A run stopped before its end (Ctrl-C) samples from its newest checkpoint, said on stderr.
  const RunWeights found = find_run_weights(options.run_dir);
  if (!found.note.empty())
    std::fprintf(stderr, "sample: %s\n", found.note.c_str());
  const std::string& weights_path = found.weights;
  TrainConfig run_config;
  load_toml_config(run_config, found.run_dir + "/config.toml");
  run_config.device = device_choice;  // where it samples is this command's choice
  run_config.resume.clear();          // the run's own resume and output settings do not apply
  run_config.out.clear();
  SessionRequest request;
  request.cpu = SessionCpu::Untouched;
  request.data = SessionData::None;  // the prompt is the input
  const Session session = open_session(run_config, request);
  const TrainConfig& config = session.config;
  const torch::Device device = session.device;
  const bool scripted = is_torchscript_model(config.model);
  if (!is_sequence_model(config.model) && !(scripted && config.task_kind() == TaskKind::Lm)) {
    throw Error(ErrorKind::Usage,
                "run '" + options.run_dir + "' trained " + config.model +
                    ", which classifies images; sample draws text from a language model",
                "give a run trained with --model gpt or a TorchScript language model");
  }
  if (config.is_token_file_dataset()) {
    throw Error(ErrorKind::Usage,
                "run '" + options.run_dir + "' trained on token files (" + config.dataset +
                    "): their ids mean what their tokenizer says, which bigbatch does not have",
                "sample from a run trained on text (text:PATH or jsonl:FILE), or decode the "
                "weights' output with the tokenizer that wrote the token files");
  }
  // The run's tokenizer, before the model: a sentencepiece model that moved is named here, one
  // replaced by another under its name too (its ids would decode into other pieces).
  const auto tokenizer = make_tokenizer(config.tokenizer);
  std::map<std::string, std::string> metadata;
  load_safetensors(weights_path, &metadata);
  check_tokenizer_of_weights(metadata, config.sentencepiece_model(), options.run_dir);
  const int64_t vocabulary = tokenizer->vocabulary();
  const int32_t end_of_text = tokenizer->end_of_text();
  torch::NoGradGuard no_grad;
  torch::nn::Sequential model{nullptr};
  if (scripted) {
    // The module as the run wrote it back, else the file it trained.
    const std::string written = found.run_dir + "/model.pt";
    model = torch::nn::Sequential(std::shared_ptr<torch::nn::SequentialImpl>(
        load_scripted_model(path_exists(written) ? written : torchscript_path(config.model))));
  } else {
    ModelSpec spec;
    spec.name = config.model;
    spec.gpt.vocab = vocabulary;
    spec.gpt.seq_len = config.seq_len;
    spec.gpt.layers = config.layers;
    spec.gpt.d_model = config.d_model;
    spec.gpt.heads = config.heads;
    model = make_model(spec);
  }
  load_weights(weights_path, *model);
  model->to(device);
  model->eval();

  std::vector<int32_t> text_ids, text_bytes;
  try {
    tokenizer->encode(options.prompt, text_ids, text_bytes);
  } catch (const Error& e) {
    // The tokenizer's advice is for a corpus; a prompt is typed.
    const bool utf8 = e.problem().find("is not UTF-8") != std::string::npos;
    throw Error(
        e.kind(), "--prompt " + e.problem(),
        utf8 ? "give the prompt in UTF-8 (the terminal's or the shell's encoding)" : e.hint());
  }
  std::vector<int64_t> tokens = {end_of_text};
  tokens.insert(tokens.end(), text_ids.begin(), text_ids.end());
  SampleResult result;
  auto generator = at::detail::createCPUGenerator(options.seed);
  for (int64_t i = 0; i < options.tokens; ++i) {
    // The model has seq_len positions: it sees the latest seq_len tokens.
    const int64_t begin = std::max<int64_t>(0, int64_t(tokens.size()) - config.seq_len);
    const auto input =
        torch::tensor(std::vector<int64_t>(tokens.begin() + begin, tokens.end())).unsqueeze(0);
    // The tokenizer's ids only (a module may have a larger vocabulary).
    // The draw on the CPU, from the CPU's generator: the same text on any device.
    auto logits = model->forward(input.to(device))
                      .select(1, input.size(1) - 1)
                      .squeeze(0)
                      .narrow(0, 0, vocabulary);
    logits = logits.to(torch::kCPU, torch::kFloat64) / options.temperature;
    if (options.top_k > 0 && options.top_k < logits.size(0)) {
      const auto kth = std::get<0>(logits.topk(options.top_k)).min();
      logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
    }
    const auto probabilities = torch::softmax(logits, 0);
    const int64_t token =
        torch::multinomial(probabilities, 1, /*replacement=*/false, generator).item<int64_t>();
    ++result.drawn;
    if (token == end_of_text) {
      result.ended = true;
      break;
    }
    tokens.push_back(token);
    text_ids.push_back(static_cast<int32_t>(token));
  }
  // The prompt and what followed, decoded as a whole: a subword tokenizer's pieces join (and
  // the space a piece starts with stays) only so.
  result.text = tokenizer->decode(text_ids);
  return result;
}

}  // namespace bigbatch
