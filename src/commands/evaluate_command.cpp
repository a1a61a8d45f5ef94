#include "commands/evaluate_command.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/dataset.h"
#include "data/npy_format.h"
#include "device/device.h"
#include "device/resources.h"
#include "io/safetensors.h"
#include "models/model_choices.h"
#include "runtime/runtime_env.h"
#include "session/session.h"
#include "train/evaluate.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// A run without RUN/model.pt (stopped before its end) evaluates the module file config.toml
// names, which must still be the one the run trained (its checkpoints record its digest). Another
// valid module there would evaluate other code with these weights.
void check_module_is_the_runs(const std::string& run_dir, const std::string& module) {
  const auto checkpoints = list_checkpoints(run_dir);
  if (checkpoints.empty() || !path_exists(module))
    return;  // nothing recorded to compare; a missing file is refused when it is loaded
  const std::string state_path = checkpoints.back().second + "/state.json";
  const auto state = nlohmann::json::parse(read_text_file(state_path, kMaxConfigFileBytes), nullptr,
                                           /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("identity") || !state["identity"].is_object() ||
      !state["identity"].contains("model_file") || !state["identity"]["model_file"].is_string())
    return;
  if (state["identity"]["model_file"].get<std::string>() != file_digest(module)) {
    throw Error(ErrorKind::Format,
                "'" + module + "' is not the module run '" + run_dir +
                    "' trained (its model_file digest differs from the one its checkpoints "
                    "record), and the run has no model.pt of its own",
                "put the module the run trained back at that path");
  }
}

bool is_weights_file(const std::string& path) {
  const std::string suffix = ".safetensors";
  return path.size() > suffix.size() &&
         path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The configuration that rebuilds the model, and the weights that fill it.
TrainConfig source_config(const EvaluateOptions& options, std::string& weights, std::string& note) {
  if (options.source.empty())
    throw Error(ErrorKind::Usage, "no run directory or weights file given", "e.g. runs/a");
  TrainConfig config;
  if (is_weights_file(options.source)) {
    std::map<std::string, std::string> metadata;
    load_safetensors(options.source, &metadata);  // checks the file, names any damage
    const auto model = metadata.find("model");
    if (model == metadata.end() || is_sequence_model(model->second) ||
        is_torchscript_model(model->second)) {
      throw Error(ErrorKind::Usage,
                  "weights file '" + options.source + "' does not say how to rebuild its model" +
                      (model == metadata.end() ? "" : " (" + model->second + ")"),
                  "give the run directory that wrote it: its config.toml holds the model's shape");
    }
    config.model = model->second;
    const auto hidden = metadata.find("hidden");
    if (hidden != metadata.end() && !hidden->second.empty()) {
      config.hidden.clear();
      for (const std::string& width : split(hidden->second, ',')) {
        const auto value = parse_int(width);
        if (!value)
          throw Error(
              ErrorKind::Format,
              "weights file '" + options.source + "' has hidden widths '" + hidden->second + "'",
              "give the run directory that wrote it");
        config.hidden.push_back(*value);
      }
    }
    // How its inputs were prepared, as the weights record it; older files used Fashion-MNIST's
    // constants, which complete_older_run assumes.
    const auto mean = metadata.find("pixel_mean");
    const auto deviation = metadata.find("pixel_std");
    if (mean != metadata.end() && deviation != metadata.end()) {
      const auto m = parse_double(mean->second), d = parse_double(deviation->second);
      if (!m || !d || !(*d > 0) || !(*m >= 0 && *m <= 1)) {
        throw Error(ErrorKind::Format,
                    "weights file '" + options.source + "' has pixel_mean '" + mean->second +
                        "' and pixel_std '" + deviation->second + "'",
                    "give the run directory that wrote it");
      }
      config.pixel_mean = *m;
      config.pixel_std = *d;
    }
    weights = options.source;
  } else {
    if (!path_exists(options.source + "/config.toml") &&
        !path_exists(options.source + "/state.json")) {
      throw Error(ErrorKind::Io,
                  "'" + options.source +
                      "' is neither a run directory (no config.toml) nor a "
                      ".safetensors file",
                  "give the directory a bigbatch train run wrote, or its weights file");
    }
    // A run stopped before its end is read from its newest checkpoint, said on the way.
    const RunWeights found = find_run_weights(options.source);
    if (!found.note.empty())
      note = found.note;
    load_toml_config(config, found.run_dir + "/config.toml");
    weights = found.weights;
    // The module as the run wrote it back, not the file it started from: that file may have
    // moved, or been replaced by another valid module that would evaluate other code.
    const std::string written = found.run_dir + "/model.pt";
    if (is_torchscript_model(config.model)) {
      if (path_exists(written))
        config.model = "torchscript:" + written;
      else
        check_module_is_the_runs(found.run_dir, torchscript_path(config.model));
    }
  }
  config.complete_older_run();  // the run's own normalisation, never a new measurement
  if (!options.weights.empty())
    weights = options.weights;
  if (!options.dataset.empty()) {
    config.dataset = options.dataset;
    config.train_subset = 0;  // the run's cut of its own training set, not of this data
  }
  // The run's own resume and output settings do not apply here.
  config.resume.clear();
  config.out.clear();
  return config;  // validated by the session it opens
}

const TensorDataset& chosen_split(const DatasetSplits& data, const std::string& split,
                                  const std::string& dataset) {
  if (split == "train")
    return data.train;
  if (split == "val") {
    if (data.validation.size() == 0) {
      throw Error(ErrorKind::Usage, "dataset '" + dataset + "' has no validation split here",
                  "the run held none out (--val-size 0); use --split test or train");
    }
    return data.validation;
  }
  if (split == "test") {
    if (data.test.size() == 0) {
      throw Error(ErrorKind::Usage, "dataset '" + dataset + "' has no test split",
                  "text corpora hold out a validation split: use --split val");
    }
    return data.test;
  }
  throw Error(ErrorKind::Usage, "--split must be test, val or train, got '" + split + "'",
              "e.g. --split test");
}

// Blank samples laid out as the ones the run's model was built for, as its weights record them;
// nullopt for weights from before they did (and for language models).
std::optional<TensorDataset> trained_samples(const std::string& weights) {
  std::map<std::string, std::string> metadata;
  load_safetensors(weights, &metadata);
  return blank_samples(metadata);
}

// Samples of the shape the model was trained on, and labels it has outputs for.
void check_data_fits_the_model(const TensorDataset& trained, const TensorDataset& data,
                               const std::string& dataset) {
  if (data.is_tokens())
    return;
  if (data.inputs.sizes().slice(1) != trained.inputs.sizes().slice(1)) {
    throw Error(ErrorKind::Data,
                "dataset '" + dataset + "' holds samples of shape " +
                    c10::str(data.inputs.sizes().slice(1)) + "; the run's model takes " +
                    c10::str(trained.inputs.sizes().slice(1)),
                "evaluate it on data of the training samples' shape");
  }
  if (data.is_regression() != trained.is_regression()) {
    throw Error(ErrorKind::Data,
                "dataset '" + dataset + "' holds " +
                    (data.is_regression() ? "regression values" : "class labels") +
                    "; the run's model " +
                    (trained.is_regression() ? "predicts values" : "classifies"),
                "evaluate it on data of the run's task");
  }
  if (!data.is_regression() && data.classes > trained.classes) {
    throw Error(ErrorKind::Data,
                "dataset '" + dataset + "' has labels up to " + std::to_string(data.classes - 1) +
                    "; the run's model has outputs for " + std::to_string(trained.classes) +
                    " classes (0 to " + std::to_string(trained.classes - 1) + ")",
                "evaluate it on data labelled with the run's classes");
  }
  if (data.is_regression() && data.outputs() != trained.outputs()) {
    throw Error(ErrorKind::Data,
                "dataset '" + dataset + "' has " + std::to_string(data.outputs()) +
                    " regression target(s) per sample; the run's model predicts " +
                    std::to_string(trained.outputs()),
                "evaluate it on data with the run's targets");
  }
}

}  // namespace

EvaluateReport run_evaluate(const EvaluateOptions& options) {
  // The device first: what cannot work is said before anything loads. A run's own device is
  // where it trained; where it is evaluated is this command's choice.
  const DeviceChoice device_choice = DeviceChoice::parse(options.device);
  std::string weights, note;
  TrainConfig source = source_config(options, weights, note);
  source.device = device_choice;
  // The weights, read once: their file checked, their record of the run's tokenizer compared
  // with the .model file before any text is tokenized by it.
  std::map<std::string, std::string> metadata;
  load_safetensors(weights, &metadata);
  check_tokenizer_of_weights(metadata, source.sentencepiece_model(), options.source);
  const Session session = open_session(source, SessionRequest{});
  const TrainConfig& config = session.config;
  const torch::Device device = session.device;
  const DatasetSplits& data = session.data;
  const TensorDataset& split = chosen_split(data, options.split, config.dataset);
  // The model as the run built it, where its weights record how; data it cannot take is said
  // as such, not as weights of another model.
  const std::optional<TensorDataset> trained = blank_samples(metadata);
  if (trained)
    check_data_fits_the_model(*trained, data.train, config.dataset);
  torch::manual_seed(config.seed);
  auto model = build_model(config, trained ? *trained : data.train);
  load_weights(weights, *model);
  model->to(device);
  const EvalResult result = evaluate(model, split, evaluation_rows(split));

  const bool tokens = split.is_tokens();
  nlohmann::json json = {{"model", config.model},   {"dataset", config.dataset},
                         {"split", options.split},  {"weights", weights},
                         {"samples", split.size()}, {"items", result.items},
                         {"loss", result.loss},     {"device", device.str()}};
  if (result.has_accuracy)
    json["accuracy"] = result.accuracy;
  if (result.is_regression)
    json["rmse"] = result.rmse;
  std::string text = "evaluate: " + config.model + " (" + weights + ") on " + config.dataset +
                     ", " + options.split + " split: " + std::to_string(split.size()) +
                     " samples, on " + device.str();
  if (tokens) {
    json["perplexity"] = std::exp(result.loss);
    const bool text_bytes = result.has_bits_per_byte;  // not known for token files
    if (text_bytes)
      json["bits_per_byte"] = result.bits_per_byte;
    text +=
        ", " + std::to_string(result.items) + " target tokens\nloss " +
        format_fixed(result.loss, 4) + " per token, perplexity " +
        format_fixed(std::exp(result.loss), 2) + ", " +
        (text_bytes ? format_fixed(result.bits_per_byte, 4) + " bits per byte, " : std::string()) +
        "next-token accuracy " + format_fixed(100 * result.accuracy, 2) + "%\n";
  } else {
    text +=
        "\nloss " + format_fixed(result.loss, 4) + " per item" +
        (result.has_accuracy ? ", accuracy " + format_fixed(100 * result.accuracy, 2) + "%" : "") +
        (result.is_regression ? ", RMSE " + format_significant(result.rmse) : "") + "\n";
  }
  if (!note.empty()) {
    json["note"] = note;
    text = "evaluate: " + note + "\n" + text;
  }
  return {text, json.dump(2) + "\n"};
}

std::string run_predict(const PredictOptions& options) {
  const DeviceChoice device_choice = DeviceChoice::parse(options.device);
  EvaluateOptions source;
  source.source = options.source;
  source.weights = options.weights;
  std::string weights, note;
  TrainConfig run_config = source_config(source, weights, note);
  run_config.device = device_choice;
  SessionRequest request;
  request.data = SessionData::None;  // the samples are --input's
  const Session session = open_session(run_config, request);
  const TrainConfig& config = session.config;
  const torch::Device device = session.device;
  if (config.task_kind() == TaskKind::Lm) {
    throw Error(ErrorKind::Usage,
                "predict reads samples for a classifier or a regression; this run is a " +
                    std::string(to_string(config.task_kind())) + " run",
                "draw text from a language model with bigbatch sample RUN_DIR");
  }
  if (options.input.empty() || options.output.empty())
    throw Error(ErrorKind::Usage, "predict needs --input X.npy and --output Y.npy",
                "e.g. --input x_new.npy --output probabilities.npy");
  check_output_file(options.output, "--output", {options.input}, "predictions.npy");
  // numpy.load reads the array under any name, but a name of another format misleads whoever
  // opens it next (a .safetensors that is a .npy).
  const std::string suffix = std::filesystem::path(options.output).extension().string();
  for (const char* other : {".safetensors", ".npz", ".pt", ".pth", ".csv", ".json", ".txt"}) {
    if (suffix == other) {
      throw Error(
          ErrorKind::Usage,
          "--output '" + options.output + "' names a " + suffix +
              " file, but predict writes a numpy array (.npy)",
          "name it " + std::filesystem::path(options.output).replace_extension(".npy").string());
    }
  }
  const NpyArray array = read_npy_file(options.input);
  TensorDataset inputs;
  inputs.inputs = npy_inputs(array, options.input);
  if (inputs.inputs.size(0) == 0) {
    throw Error(ErrorKind::Data,
                "'" + options.input + "' holds no samples (its shape is " +
                    c10::str(inputs.inputs.sizes()) + ")",
                "give an array with one sample per row");
  }
  const bool idx_trained = !config.is_npy_dataset();
  if (array.type == NpyType::U8 && idx_trained) {
    const PixelNormalisation pixels = idx_pixels(config);  // as the run's images were prepared
    inputs.inputs.sub_(pixels.mean).div_(pixels.std);
  }
  // The model's shape and outputs: as the weights record them, else (weights from before they
  // did) from the training data.
  std::optional<TensorDataset> samples = trained_samples(weights);
  if (!samples)
    samples = load_data_outside_budget(config).train;
  if (inputs.inputs.sizes().slice(1) != samples->inputs.sizes().slice(1)) {
    throw Error(ErrorKind::Data,
                "'" + options.input + "' holds samples of shape " +
                    c10::str(inputs.inputs.sizes().slice(1)) + "; the model was trained on " +
                    c10::str(samples->inputs.sizes().slice(1)),
                "give inputs of the training samples' shape");
  }
  const bool regression = samples->is_regression();
  torch::manual_seed(config.seed);
  auto model = build_model(config, *samples);
  load_weights(weights, *model);
  model->to(device);
  model->eval();
  std::vector<torch::Tensor> outputs;
  {
    c10::InferenceMode inference;
    for (int64_t begin = 0; begin < inputs.inputs.size(0); begin += kEvalBatchSize) {
      const int64_t end = std::min(inputs.inputs.size(0), begin + kEvalBatchSize);
      torch::Tensor logits = model->forward(inputs.inputs.slice(0, begin, end).to(device))
                                 .to(torch::kCPU, torch::kFloat32);
      // A regression's outputs are its predictions; a classifier's, logits to normalise.
      outputs.push_back(options.logits || regression ? logits : torch::softmax(logits, 1));
    }
  }
  torch::Tensor all = torch::cat(outputs).contiguous();
  if (regression && samples->targets.dim() == 1)
    all = all.reshape({-1});  // y was [N]: so are its predictions
  NpyArray out;
  out.type = NpyType::F32;
  out.shape = all.sizes().vec();
  out.data.assign(static_cast<const char*>(all.data_ptr()), all.numel() * sizeof(float));
  atomic_write_file(options.output, encode_npy(out));
  const std::string said = note.empty() ? "" : "predict: " + note + "\n";
  if (regression) {
    return said + "predict: predicted values of " + std::to_string(out.shape[0]) + " samples" +
           (out.shape.size() > 1 ? " x " + std::to_string(out.shape[1]) + " targets" : "") +
           " written to " + options.output + " (computed on " + device.str() + ")\n";
  }
  return said + "predict: " + std::string(options.logits ? "logits" : "class probabilities") +
         " of " + std::to_string(out.shape[0]) + " samples x " + std::to_string(out.shape[1]) +
         " classes written to " + options.output + " (computed on " + device.str() + ")\n";
}

}  // namespace bigbatch
