#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "io/safetensors.h"

namespace bigbatch {

namespace fs = std::filesystem;

namespace {

// libtorch's messages carry a backtrace after the first line.
std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

[[noreturn]] void bad_checkpoint(const std::string& dir, const std::string& what,
                                 const std::string& hint) {
  throw Error(ErrorKind::Format, "checkpoint '" + dir + "' " + what, hint);
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    return;
  ::fsync(fd);
  ::close(fd);
}

nlohmann::json progress_json(const TrainingProgress& p) {
  return {{"step", p.step},
          {"epoch", p.epoch},
          {"update_in_epoch", p.update_in_epoch},
          {"position_in_epoch", p.position_in_epoch},
          {"global_batch", p.global_batch},
          {"samples_seen", p.samples_seen},
          {"items_seen", p.items_seen},
          {"train_seconds", p.train_seconds},
          {"epoch_samples", p.epoch_counts.samples},
          {"epoch_items", p.epoch_counts.items},
          {"epoch_loss_sum", p.epoch_counts.loss_sum},
          {"epoch_correct", p.epoch_counts.correct},
          {"micro_step", p.micro_step},
          {"noise",
           {{"gradient_sq_ema", p.noise.gradient_sq_ema},
            {"trace_ema", p.noise.trace_ema},
            {"weight", p.noise.weight},
            {"samples", p.noise.samples}}},
          {"scale_invariant_step", p.scale_invariant_step},
          {"metrics_bytes", p.metrics_bytes},
          {"recorded_epoch_step", p.recorded_epoch_step},
          {"oom_backoffs", p.oom_backoffs}};
}

TrainingProgress progress_from(const nlohmann::json& j) {
  TrainingProgress p;
  p.step = j.at("step").get<int64_t>();
  p.epoch = j.at("epoch").get<int64_t>();
  p.update_in_epoch = j.at("update_in_epoch").get<int64_t>();
  p.position_in_epoch = j.value("position_in_epoch", int64_t{-1});
  p.global_batch = j.value("global_batch", int64_t{0});
  p.samples_seen = j.at("samples_seen").get<int64_t>();
  // Absent in checkpoints from before items were counted apart: one item per sample then.
  p.items_seen = j.value("items_seen", p.samples_seen);
  p.train_seconds = j.at("train_seconds").get<double>();
  p.epoch_counts.items = j.at("epoch_items").get<int64_t>();
  p.epoch_counts.samples = j.value("epoch_samples", p.epoch_counts.items);
  p.epoch_counts.loss_sum = j.at("epoch_loss_sum").get<double>();
  p.epoch_counts.correct = j.at("epoch_correct").get<int64_t>();
  p.micro_step = j.at("micro_step").get<int64_t>();
  if (j.contains("noise")) {  // absent in checkpoints written before the noise scale existed
    const auto& n = j.at("noise");
    p.noise.gradient_sq_ema = n.at("gradient_sq_ema").get<double>();
    p.noise.trace_ema = n.at("trace_ema").get<double>();
    p.noise.weight = n.at("weight").get<double>();
    p.noise.samples = n.at("samples").get<int64_t>();
  }
  p.scale_invariant_step = j.value("scale_invariant_step", 0.0);
  p.metrics_bytes = j.value("metrics_bytes", int64_t{-1});
  p.recorded_epoch_step = j.value("recorded_epoch_step", int64_t{-1});
  p.oom_backoffs = j.value("oom_backoffs", int64_t{0});
  return p;
}

}  // namespace

nlohmann::json checkpoint_identity(const std::string& model, const std::vector<int64_t>& hidden,
                                   const std::string& dataset, int64_t dataset_size,
                                   int64_t global_batch, uint64_t seed, bool shuffle,
                                   const std::string& optimizer) {
  return {{"model", model},
          {"hidden", model == "mlp" ? nlohmann::json(hidden) : nlohmann::json()},
          {"dataset", dataset},
          {"dataset_size", dataset_size},
          {"global_batch_size", global_batch},
          {"seed", seed},
          {"shuffle", shuffle},
          {"optimizer", optimizer}};
}

void write_checkpoint(const std::string& run_dir, const TrainingProgress& progress,
                      const nlohmann::json& identity, torch::nn::Module& model,
                      torch::optim::Optimizer& optimizer, int64_t keep, const nlohmann::json& plan,
                      const PartialWindow* window) {
  const std::string root = run_dir + "/checkpoints";
  ensure_directory(root);
  const std::string name = checkpoint_directory_name(progress.step, progress.micro_step);
  const std::string final_dir = root + "/" + name;
  const std::string temporary = root + "/.tmp-" + name + "-" + std::to_string(::getpid());
  std::error_code error;
  fs::remove_all(temporary, error);
  ensure_directory(temporary);
  try {
    save_weights(temporary + "/weights.safetensors", model,
                 {{"format", "pt"}, {"producer", "bigbatch"}});
    {
      // Serialised in memory, then written by our own atomic writer: libtorch's file writer
      // throws from its destructor when the disk fills up, which would abort the process.
      torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      std::string bytes;
      archive.save_to([&bytes](const void* data, size_t size) {
        bytes.append(static_cast<const char*>(data), size);
        return size;
      });
      atomic_write_file(temporary + "/optimizer.pt", bytes);
    }
    nlohmann::json state = {{"format_version", kCheckpointFormatVersion},
                            {"producer", "bigbatch"},
                            {"progress", progress_json(progress)},
                            {"identity", identity},
                            {"plan", plan}};
    // Nothing in the current models draws random numbers while training, but a resumed run
    // must continue the generator exactly once something does (dropout, augmentation).
    save_safetensors(temporary + "/rng.safetensors",
                     {{"cpu_generator", at::detail::getDefaultCPUGenerator().get_state()}}, {});
    if (progress.micro_step > 0) {
      BB_INTERNAL_ASSERT(window != nullptr, "a mid-window checkpoint needs its partial window");
      NamedTensors gradients;
      for (size_t i = 0; i < window->gradients.size(); ++i) {
        gradients.emplace_back("gradient." + std::to_string(i), window->gradients[i]);
      }
      save_safetensors(temporary + "/window.safetensors", gradients, {{"producer", "bigbatch"}});
      state["window"] = {{"micro_batch_size", window->micro_batch_size},
                         {"world_size", window->world_size},
                         {"micro_batch_tokens", window->micro_batch_tokens},
                         {"micro_steps", window->window.micro_steps},
                         {"samples", window->window.counts.samples},
                         {"items", window->window.counts.items},
                         {"loss_sum", window->window.counts.loss_sum},
                         {"correct", window->window.counts.correct},
                         {"first_items", window->window.first_items},
                         {"first_sq_norm", window->window.first_sq_norm}};
    }
    atomic_write_file(temporary + "/state.json", state.dump(2) + "\n");
    fsync_path(temporary, true);
    // A checkpoint of the same step (a resumed run passing it again) is replaced whole.
    fs::remove_all(final_dir, error);
    fs::rename(temporary, final_dir);
    fsync_path(root, true);
  } catch (const Error&) {
    fs::remove_all(temporary, error);
    throw;
  } catch (const std::exception& e) {
    fs::remove_all(temporary, error);
    throw Error(ErrorKind::Io,
                "cannot write checkpoint '" + final_dir + "': " + first_line(e.what()),
                "check the free disk space and permissions; earlier checkpoints are untouched");
  }
  // Prune the oldest, never the one just written.
  auto all = list_checkpoints(run_dir);
  while (keep > 0 && static_cast<int64_t>(all.size()) > keep) {
    // Renamed away first, so a kill during the removal never leaves a half-deleted step_N
    // where a resume would look (issue 21): the rename is atomic, the trash is not listed.
    const std::string trash = root + "/.trash-" + fs::path(all.front().second).filename().string() +
                              "-" + std::to_string(::getpid());
    fs::rename(all.front().second, trash, error);
    fs::remove_all(error ? fs::path(all.front().second) : fs::path(trash), error);
    all.erase(all.begin());
  }
}

TrainingProgress read_checkpoint(const std::string& dir, const nlohmann::json& identity,
                                 torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                 PartialWindow* window) {
  nlohmann::json state = nlohmann::json::parse(read_text_file(dir + "/state.json"), nullptr,
                                               /*allow_exceptions=*/false);
  if (state.is_discarded() || !state.is_object() || !state.contains("format_version")) {
    bad_checkpoint(dir, "has an unreadable state.json",
                   "it is damaged; resume from an earlier checkpoint");
  }
  if (!state["format_version"].is_number_integer() ||
      state["format_version"].get<int64_t>() != kCheckpointFormatVersion) {
    bad_checkpoint(dir,
                   "has format version " + state["format_version"].dump() +
                       ", this bigbatch reads version " + std::to_string(kCheckpointFormatVersion),
                   "resume it with the bigbatch version that wrote it");
  }
  const auto& saved = state["identity"];
  // The most telling difference first: a different model explains a different hidden size.
  // A language model's shape explains a different dataset size (its rows are cut by seq_len).
  for (const std::string key :
       {"model", "model_file", "seq_len", "sequences", "layers", "d_model", "heads", "dataset",
        "dataset_size", "global_batch_size", "optimizer", "seed", "shuffle", "hidden"}) {
    if (!identity.contains(key))
      continue;
    const auto& value = identity[key];
    if (!saved.contains(key) || saved[key] != value) {
      bad_checkpoint(dir,
                     "was written with " + key + " = " +
                         (saved.contains(key) ? saved[key].dump() : "(none)") + ", this run has " +
                         value.dump(),
                     "resume with the same " + key +
                         " (flags override the run's config.toml), or start a new run");
    }
  }
  TrainingProgress progress;
  try {
    progress = progress_from(state.at("progress"));
  } catch (const std::exception&) {
    bad_checkpoint(dir, "has incomplete progress counters in state.json",
                   "resume from an earlier checkpoint");
  }
  load_weights(dir + "/weights.safetensors", model);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(dir + "/optimizer.pt");
    optimizer.load(archive);
  } catch (const std::exception& e) {
    bad_checkpoint(dir, "has an unreadable optimizer.pt: " + first_line(e.what()),
                   "resume from an earlier checkpoint");
  }
  if (path_exists(dir + "/rng.safetensors")) {
    const NamedTensors rng = load_safetensors(dir + "/rng.safetensors");
    if (rng.size() != 1 || rng[0].first != "cpu_generator" ||
        rng[0].second.scalar_type() != torch::kUInt8) {
      bad_checkpoint(dir, "has an rng.safetensors without the CPU generator state",
                     "resume from an earlier checkpoint");
    }
    try {
      auto generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(rng[0].second);
    } catch (const std::exception& e) {
      bad_checkpoint(dir, "has an unusable generator state: " + first_line(e.what()),
                     "resume from an earlier checkpoint");
    }
  }
  if (progress.micro_step > 0 && window) {
    try {
      const auto& w = state.at("window");
      window->micro_batch_size = w.at("micro_batch_size").get<int64_t>();
      window->world_size = w.at("world_size").get<int64_t>();
      window->micro_batch_tokens = w.value("micro_batch_tokens", int64_t{0});
      WindowState& partial = window->window;
      partial.micro_steps = w.at("micro_steps").get<int64_t>();
      partial.counts.items = w.at("items").get<int64_t>();
      partial.counts.samples = w.value("samples", partial.counts.items);
      partial.counts.loss_sum = w.at("loss_sum").get<double>();
      partial.counts.correct = w.at("correct").get<int64_t>();
      partial.first_items = w.value("first_items", int64_t{0});
      partial.first_sq_norm = w.value("first_sq_norm", 0.0);
    } catch (const std::exception&) {
      bad_checkpoint(dir, "is inside a window but its state.json does not describe the window",
                     "resume from an earlier checkpoint");
    }
    const NamedTensors gradients = load_safetensors(dir + "/window.safetensors");
    const auto parameters = model.parameters();
    if (gradients.size() != parameters.size()) {
      bad_checkpoint(dir,
                     "holds " + std::to_string(gradients.size()) + " window gradients for " +
                         std::to_string(parameters.size()) + " parameters",
                     "resume from an earlier checkpoint");
    }
    window->gradients.clear();
    for (size_t i = 0; i < gradients.size(); ++i) {
      if (gradients[i].second.sizes() != parameters[i].sizes()) {
        bad_checkpoint(dir, "holds a window gradient of the wrong shape",
                       "resume from an earlier checkpoint");
      }
      window->gradients.push_back(gradients[i].second);
    }
  }
  return progress;
}

}  // namespace bigbatch
