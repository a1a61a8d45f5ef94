#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "io/safetensors.h"
#include "models/models.h"
#include "stats/loss_spikes.h"

namespace bigbatch {

namespace fs = std::filesystem;

namespace {

// The files of a checkpoint directory besides state.json, each recorded there by its digest.
constexpr const char* kCheckpointParts[] = {"weights.safetensors", "optimizer.pt",
                                            "rng.safetensors", "window.safetensors",
                                            "best.safetensors"};

// libtorch's messages carry a backtrace after the first line.
[[noreturn]] void bad_checkpoint(const std::string& dir, const std::string& what,
                                 const std::string& hint) {
  throw Error(ErrorKind::Format, "checkpoint '" + dir + "' " + what, hint);
}

// The random generators a resumed run must continue: the CPU's, and the device's when the
// model is on a GPU (dropout draws there).
NamedTensors generator_states(const torch::nn::Module& model) {
  NamedTensors states = {{"cpu_generator", at::detail::getDefaultCPUGenerator().get_state()}};
  const torch::Device device = model_device(model);
  if (device.is_cuda())
    states.emplace_back("cuda_generator", at::globalContext().defaultGenerator(device).get_state());
  return states;
}

void restore_generator_states(const NamedTensors& states, const torch::nn::Module& model,
                              const std::string& dir) {
  const auto state_of = [&](const std::string& name) -> const torch::Tensor* {
    for (const auto& [key, tensor] : states) {
      if (key == name)
        return &tensor;
    }
    return nullptr;
  };
  const bool known = std::all_of(states.begin(), states.end(), [](const auto& named) {
    return (named.first == "cpu_generator" || named.first == "cuda_generator") &&
           named.second.scalar_type() == torch::kUInt8;
  });
  const torch::Tensor* cpu = state_of("cpu_generator");
  if (!known || cpu == nullptr) {
    bad_checkpoint(dir, "has an rng.safetensors without the CPU generator state",
                   "resume from an earlier checkpoint");
  }
  try {
    // Generators are handles: a copy sets the shared generator's state.
    at::Generator cpu_generator = at::detail::getDefaultCPUGenerator();
    cpu_generator.set_state(*cpu);
    // A GPU's generator continues where it was when the run resumes on a GPU; a run moved to
    // or from one starts that device's stream afresh (its arithmetic differs anyway).
    const torch::Device device = model_device(model);
    if (const torch::Tensor* cuda = state_of("cuda_generator"); cuda && device.is_cuda()) {
      at::Generator cuda_generator = at::globalContext().defaultGenerator(device);
      cuda_generator.set_state(*cuda);
    }
  } catch (const std::exception& e) {
    bad_checkpoint(dir, "has an unusable generator state: " + first_line(e.what()),
                   "resume from an earlier checkpoint");
  }
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    return;
  ::fsync(fd);
  ::close(fd);
}

// A watched metric's count (null: nothing counted yet; best null: no finite value yet).
nlohmann::json watch_json(const MetricWatch& w) {
  if (w.counted_step < 0)
    return nullptr;
  return {{"metric", w.metric},
          {"best", w.seen ? nlohmann::json(w.best) : nlohmann::json(nullptr)},
          {"best_step", w.best_step},
          {"since_best", w.since_best},
          {"counted_step", w.counted_step}};
}

// --global-batch auto's measurements and decision log (an infinite band's end as null).
nlohmann::json decision_json(const BatchDecision& d) {
  return {{"step", d.step},
          {"samples_seen", d.samples_seen},
          {"from_batch", d.from_batch},
          {"to_batch", d.to_batch},
          {"noise_low", d.noise_low},
          {"noise_scale", d.noise_scale},
          {"noise_high",
           std::isfinite(d.noise_high) ? nlohmann::json(d.noise_high) : nlohmann::json(nullptr)},
          {"update_cost", d.update_cost},
          {"goodput_gain", d.goodput_gain},
          {"test_samples", d.test_samples}};
}

nlohmann::json growth_json(const BatchGrowthState& g) {
  nlohmann::json decisions = nlohmann::json::array();
  for (const BatchDecision& d : g.decisions)
    decisions.push_back(decision_json(d));
  nlohmann::json tests = nlohmann::json::array();
  for (const BatchTest& t : g.tests) {
    tests.push_back({{"proposal", decision_json(t.proposal)},
                     {"start_loss", t.start_loss},
                     {"current_loss", t.current_loss},
                     {"doubled_loss", t.doubled_loss},
                     {"difference", t.difference},
                     {"standard_error", t.standard_error},
                     {"bound", t.bound},
                     {"confidence", t.confidence},
                     {"control_rate_factor", t.control_rate_factor},
                     {"branches", t.branches},
                     {"kept", t.kept},
                     {"extra_seconds", t.extra_seconds}});
  }
  return {{"tally_updates", g.tally.updates},
          {"tally_samples", g.tally.samples},
          {"tally_gradient_seconds", g.tally.gradient_seconds},
          {"tally_update_seconds", g.tally.update_seconds},
          {"update_cost", g.update_cost},
          {"last_check_step", g.last_check_step},
          {"last_gain", g.last_gain},
          {"decisions", decisions},
          {"proposal", g.proposal ? decision_json(*g.proposal) : nlohmann::json(nullptr)},
          {"tests", tests},
          {"rejected_in_a_row", g.rejected_in_a_row}};
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
            {"samples", p.noise.samples},
            {"gradient_sq_sq_ema", p.noise.gradient_sq_sq_ema},
            {"trace_sq_ema", p.noise.trace_sq_ema},
            {"product_ema", p.noise.product_ema},
            {"weight_sq", p.noise.weight_sq},
            {"gradient_sq_sum", p.noise.gradient_sq_sum},
            {"trace_sum", p.noise.trace_sum},
            {"spread_samples", p.noise.spread_samples},
            {"memory_batch", p.noise.memory_batch},
            {"preconditioned", p.noise.preconditioned}}},
          {"scale_invariant_step", p.scale_invariant_step},
          {"metrics_bytes", p.metrics_bytes},
          {"recorded_epoch_step", p.recorded_epoch_step},
          {"oom_backoffs", p.oom_backoffs},
          {"recent_losses", p.recent_losses},
          {"skipped_updates", p.skipped_updates},
          {"bad_in_a_row", p.bad_in_a_row},
          {"growth", growth_json(p.growth)},
          {"early_stop", watch_json(p.early_stop)},
          {"keep_best", watch_json(p.keep_best)}};
}

// The fields of state.json, read strictly: a checkpoint that was edited or damaged names the
// field, not a NaN rate or a directory step_-00003 later (issue 21).
class StateFields {
 public:
  StateFields(const nlohmann::json& object, std::string prefix, const std::string& dir)
      : object_(object), prefix_(std::move(prefix)), dir_(dir) {}

  // A whole number >= `minimum`; `fallback` when absent (none: the field is required).
  int64_t count(const char* key, int64_t minimum = 0,
                std::optional<int64_t> fallback = std::nullopt) const {
    if (!object_.contains(key)) {
      if (!fallback)
        bad(key, "is missing");
      return *fallback;
    }
    const auto& v = object_.at(key);
    if (!v.is_number_integer())
      bad(key, "is " + v.dump() + ", not a whole number");
    const int64_t value = v.get<int64_t>();
    if (value < minimum)
      bad(key,
          "is " + std::to_string(value) + ", below its least value " + std::to_string(minimum));
    return value;
  }

  // A finite number (>= 0 unless `signed_value`); `fallback` when absent (none: required).
  double amount(const char* key, std::optional<double> fallback = std::nullopt,
                bool signed_value = false) const {
    if (!object_.contains(key)) {
      if (!fallback)
        bad(key, "is missing");
      return *fallback;
    }
    const auto& v = object_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || (!signed_value && v.get<double>() < 0))
      bad(key, "is " + v.dump() + ", not a finite number" + (signed_value ? "" : " >= 0"));
    return v.get<double>();
  }

  // A list of at most `most` finite numbers; empty when absent.
  std::vector<double> amounts(const char* key, size_t most) const {
    if (!object_.contains(key))
      return {};
    const auto& v = object_.at(key);
    if (!v.is_array() || v.size() > most)
      bad(key, "is not a list of at most " + std::to_string(most) + " numbers");
    std::vector<double> values;
    for (const auto& e : v) {
      if (!e.is_number() || !std::isfinite(e.get<double>()))
        bad(key, "holds " + e.dump() + ", not a finite number");
      values.push_back(e.get<double>());
    }
    return values;
  }

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    bad_checkpoint(dir_, "has state.json field " + prefix_ + key + " that " + what,
                   "the file was edited or damaged: resume from an earlier checkpoint");
  }

 private:
  const nlohmann::json& object_;
  std::string prefix_;
  const std::string& dir_;
};

// Absent or null (checkpoints from before, or none counted yet): nothing seen.
MetricWatch watch_from(const nlohmann::json& j, const char* key, const std::string& dir) {
  MetricWatch w;
  if (!j.contains(key) || j.at(key).is_null())
    return w;
  if (!j.at(key).is_object())
    StateFields(j, "progress.", dir).bad(key, "is not an object");
  const nlohmann::json& o = j.at(key);
  const StateFields f(o, std::string("progress.") + key + ".", dir);
  if (!o.contains("metric") || !o.at("metric").is_string())
    f.bad("metric", "is not the name of a metric");
  w.metric = o.at("metric").get<std::string>();
  w.seen = !o.contains("best") || !o.at("best").is_null();
  if (w.seen)
    w.best = f.amount("best", std::nullopt, /*signed_value=*/true);
  w.best_step = f.count("best_step");
  w.since_best = f.count("since_best");
  w.counted_step = f.count("counted_step");
  return w;
}

BatchDecision decision_from(const nlohmann::json& j, const std::string& prefix,
                            const std::string& dir) {
  if (!j.is_object())
    StateFields(j, "", dir)
        .bad(prefix.substr(0, prefix.size() - 1), "holds " + j.dump() + ", not an object");
  const StateFields d(j, prefix, dir);
  BatchDecision decision;
  decision.step = d.count("step", 1);
  decision.samples_seen = d.count("samples_seen", 1);
  decision.from_batch = d.count("from_batch", 1);
  decision.to_batch = d.count("to_batch", 1);
  decision.noise_low = d.amount("noise_low");
  decision.noise_scale = d.amount("noise_scale");
  decision.noise_high = j.contains("noise_high") && j["noise_high"].is_null()
                            ? std::numeric_limits<double>::infinity()
                            : d.amount("noise_high");
  decision.update_cost = d.amount("update_cost");
  decision.goodput_gain = d.amount("goodput_gain");
  decision.test_samples = d.count("test_samples", 0, 0);  // absent before the branch test
  return decision;
}

BatchGrowthState growth_from(const nlohmann::json& j, const std::string& dir) {
  const StateFields f(j, "progress.growth.", dir);
  BatchGrowthState g;
  g.tally.updates = f.count("tally_updates");
  g.tally.samples = f.count("tally_samples");
  g.tally.gradient_seconds = f.amount("tally_gradient_seconds");
  g.tally.update_seconds = f.amount("tally_update_seconds");
  g.update_cost = f.amount("update_cost", std::nullopt, /*signed_value=*/true);
  if (g.update_cost < 0 && g.update_cost != -1)
    f.bad("update_cost", "is negative but not -1 (not measured yet)");
  g.last_check_step = f.count("last_check_step");
  g.last_gain = f.amount("last_gain");
  const auto list = [&](const char* key) {
    const auto& items = j.contains(key) ? j.at(key) : nlohmann::json::array();
    if (!items.is_array())
      f.bad(key, "is not a list");
    return items;
  };
  const nlohmann::json decisions = list("decisions");
  for (size_t i = 0; i < decisions.size(); ++i) {
    g.decisions.push_back(
        decision_from(decisions[i], "progress.growth.decisions[" + std::to_string(i) + "].", dir));
  }
  if (j.contains("proposal") && !j.at("proposal").is_null())
    g.proposal = decision_from(j.at("proposal"), "progress.growth.proposal.", dir);
  const nlohmann::json tests = list("tests");
  for (size_t i = 0; i < tests.size(); ++i) {
    const std::string prefix = "progress.growth.tests[" + std::to_string(i) + "].";
    if (!tests[i].is_object() || !tests[i].contains("proposal"))
      f.bad("tests", "holds " + tests[i].dump() + ", not a test with its proposal");
    const StateFields t(tests[i], prefix, dir);
    BatchTest test;
    test.proposal = decision_from(tests[i].at("proposal"), prefix + "proposal.", dir);
    test.start_loss = t.amount("start_loss");
    test.current_loss = t.amount("current_loss");
    test.doubled_loss = t.amount("doubled_loss");
    test.difference = t.amount("difference", std::nullopt, /*signed_value=*/true);
    test.standard_error = t.amount("standard_error");
    test.bound = t.amount("bound");
    test.confidence = t.amount("confidence", 0.0);
    test.control_rate_factor = t.amount("control_rate_factor", 1.0);
    test.branches = t.count("branches", 2, 2);
    if (!tests[i].contains("kept") || !tests[i].at("kept").is_boolean())
      t.bad("kept", "is not true or false");
    test.kept = tests[i].at("kept").get<bool>();
    test.extra_seconds = t.amount("extra_seconds");
    g.tests.push_back(test);
  }
  g.rejected_in_a_row = f.count("rejected_in_a_row", 0, 0);
  return g;
}

TrainingProgress progress_from(const nlohmann::json& j, const std::string& dir) {
  if (!j.is_object())
    bad_checkpoint(dir, "has no progress counters in state.json",
                   "resume from an earlier checkpoint");
  const StateFields f(j, "progress.", dir);
  TrainingProgress p;
  p.step = f.count("step");
  p.epoch = f.count("epoch");
  p.update_in_epoch = f.count("update_in_epoch");
  p.position_in_epoch = f.count("position_in_epoch", -1, -1);
  p.global_batch = f.count("global_batch", 0, 0);
  p.samples_seen = f.count("samples_seen");
  // Absent in checkpoints from before items were counted apart: one item per sample then.
  p.items_seen = f.count("items_seen", 0, p.samples_seen);
  p.train_seconds = f.amount("train_seconds");
  p.epoch_counts.items = f.count("epoch_items");
  p.epoch_counts.samples = f.count("epoch_samples", 0, p.epoch_counts.items);
  p.epoch_counts.loss_sum = f.amount("epoch_loss_sum", std::nullopt, /*signed_value=*/true);
  p.epoch_counts.correct = f.count("epoch_correct");
  p.micro_step = f.count("micro_step");
  if (j.contains("noise")) {  // absent in checkpoints written before the noise scale existed
    const StateFields n(j.at("noise"), "progress.noise.", dir);
    if (!j.at("noise").is_object())
      f.bad("noise", "is not an object");
    p.noise.gradient_sq_ema = n.amount("gradient_sq_ema", std::nullopt, /*signed_value=*/true);
    p.noise.trace_ema = n.amount("trace_ema", std::nullopt, /*signed_value=*/true);
    p.noise.weight = n.amount("weight");
    p.noise.samples = n.count("samples");
    if (j.at("noise").contains("spread_samples")) {
      p.noise.spread_samples = n.count("spread_samples");
      p.noise.gradient_sq_sq_ema = n.amount("gradient_sq_sq_ema");
      p.noise.trace_sq_ema = n.amount("trace_sq_ema");
      p.noise.product_ema = n.amount("product_ema", std::nullopt, /*signed_value=*/true);
      p.noise.weight_sq = n.amount("weight_sq");
      p.noise.gradient_sq_sum = n.amount("gradient_sq_sum", std::nullopt, /*signed_value=*/true);
      p.noise.trace_sum = n.amount("trace_sum", std::nullopt, /*signed_value=*/true);
      if (p.noise.spread_samples > p.noise.samples)
        n.bad("spread_samples",
              "is past progress.noise.samples " + std::to_string(p.noise.samples));
    }
    // Absent (a checkpoint from before the spread was kept): the averages continue, AdaScale's
    // gain with them; the spread stays unknown for this run (spread_samples < samples).
    // Absent before the memory was counted in samples: the next update's batch sets it.
    p.noise.memory_batch = n.amount("memory_batch", 0.0);
    // Absent before the preconditioned form: the raw gradient's.
    const auto& preconditioned = j.at("noise").value("preconditioned", nlohmann::json(false));
    if (!preconditioned.is_boolean())
      n.bad("preconditioned", "is " + preconditioned.dump() + ", not true or false");
    p.noise.preconditioned = preconditioned.get<bool>();
  }
  p.scale_invariant_step = f.amount("scale_invariant_step", 0.0);
  p.metrics_bytes = f.count("metrics_bytes", -1, -1);
  p.recorded_epoch_step = f.count("recorded_epoch_step", -1, -1);
  p.oom_backoffs = f.count("oom_backoffs", 0, 0);
  // Absent in checkpoints from before the loss-spike guard: it starts afresh.
  p.recent_losses = f.amounts("recent_losses", kRecentLosses);
  p.skipped_updates = f.count("skipped_updates", 0, 0);
  p.bad_in_a_row = f.count("bad_in_a_row", 0, 0);
  if (j.contains("growth")) {  // absent in checkpoints from before --global-batch auto
    if (!j.at("growth").is_object())
      f.bad("growth", "is not an object");
    p.growth = growth_from(j.at("growth"), dir);
  }
  p.early_stop = watch_from(j, "early_stop", dir);
  p.keep_best = watch_from(j, "keep_best", dir);
  for (const MetricWatch* w : {&p.early_stop, &p.keep_best}) {
    if (w->best_step > p.step || w->counted_step > p.step)
      f.bad(w == &p.early_stop ? "early_stop" : "keep_best",
            "has its best past progress.step " + std::to_string(p.step));
  }
  // The counters against each other: each is a part of the one before it.
  if (p.update_in_epoch > p.step)
    f.bad("update_in_epoch", "is past progress.step " + std::to_string(p.step));
  if (p.skipped_updates > p.step)
    f.bad("skipped_updates", "is past progress.step " + std::to_string(p.step));
  if (p.bad_in_a_row > p.skipped_updates)
    f.bad("bad_in_a_row", "is past progress.skipped_updates " + std::to_string(p.skipped_updates));
  if (p.recorded_epoch_step > p.step)
    f.bad("recorded_epoch_step", "is past progress.step " + std::to_string(p.step));
  if (p.position_in_epoch > p.samples_seen)
    f.bad("position_in_epoch", "is past progress.samples_seen " + std::to_string(p.samples_seen));
  if (p.epoch_counts.samples > p.samples_seen)
    f.bad("epoch_samples", "is past progress.samples_seen " + std::to_string(p.samples_seen));
  if (p.epoch_counts.items > p.items_seen)
    f.bad("epoch_items", "is past progress.items_seen " + std::to_string(p.items_seen));
  if (p.epoch_counts.correct > p.epoch_counts.items)
    f.bad("epoch_correct", "is past progress.epoch_items " + std::to_string(p.epoch_counts.items));
  if ((p.step > 0) != (p.samples_seen > 0))
    f.bad("samples_seen",
          "is " + std::to_string(p.samples_seen) + " after " + std::to_string(p.step) + " updates");
  return p;
}

}  // namespace

namespace {

// A dataset or model spec names its file by an absolute path since runs record those; an older
// checkpoint's relative one named the file from the directory it is resumed in, as it did then.
bool same_identity_value(const std::string& key, const nlohmann::json& saved,
                         const nlohmann::json& now) {
  if (saved == now)
    return true;
  if ((key != "dataset" && key != "model") || !saved.is_string() || !now.is_string())
    return false;
  const std::string before = saved.get<std::string>(), after = now.get<std::string>();
  const size_t colon = before.find(':');
  return colon != std::string::npos && before.compare(0, colon + 1, after, 0, colon + 1) == 0 &&
         absolute_path(before.substr(colon + 1)) == absolute_path(after.substr(colon + 1));
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
      atomic_write_file(temporary + "/optimizer.pt", optimizer_state_bytes(optimizer));
    }
    nlohmann::json state = {{"format_version", kCheckpointFormatVersion},
                            {"producer", "bigbatch"},
                            {"progress", progress_json(progress)},
                            {"identity", identity},
                            {"plan", plan}};
    // Nothing in the current models draws random numbers while training, but a resumed run
    // must continue the generator exactly once something does (dropout, augmentation).
    save_safetensors(temporary + "/rng.safetensors", generator_states(model), {});
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
    // --keep-best's file as it stands, so that a resume from here gets back the best it knew
    // (the run's file may have moved on): a hard link, as the file is only ever replaced whole.
    const std::string best = run_dir + "/best.safetensors";
    if (path_exists(best)) {
      std::error_code not_linked;  // another file system, or links refused: a copy
      fs::create_hard_link(best, temporary + "/best.safetensors", not_linked);
      if (not_linked)
        atomic_write_file(temporary + "/best.safetensors", read_text_file(best));
    }
    // Each file's digest: a resume detects a flipped bit or a file from another checkpoint.
    nlohmann::json files = nlohmann::json::object();
    for (const char* part : kCheckpointParts) {
      if (path_exists(temporary + "/" + part))
        files[part] = file_digest(temporary + "/" + part);
    }
    state["files"] = files;
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
  std::error_code same;
  while (keep > 0 && static_cast<int64_t>(all.size()) > keep &&
         !fs::equivalent(all.front().second, final_dir, same)) {
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
  nlohmann::json state =
      nlohmann::json::parse(read_text_file(dir + "/state.json", kMaxConfigFileBytes), nullptr,
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
  if (state.contains("files")) {  // absent in checkpoints written before digests were kept
    const auto& files = state["files"];
    if (!files.is_object())
      bad_checkpoint(dir, "has a state.json whose \"files\" is not an object",
                     "resume from an earlier checkpoint");
    for (const auto& [part, digest] : files.items()) {
      if (std::find(std::begin(kCheckpointParts), std::end(kCheckpointParts), part) ==
          std::end(kCheckpointParts)) {
        bad_checkpoint(dir, "lists an unknown file '" + part + "' in state.json",
                       "resume from an earlier checkpoint");
      }
      const std::string path = dir + "/" + part;
      if (!path_exists(path))
        bad_checkpoint(dir, "is missing its " + part, "resume from an earlier checkpoint");
      if (!digest.is_string() || file_digest(path) != digest.get<std::string>()) {
        bad_checkpoint(dir,
                       "has a file " + part +
                           " that is not the one it was written with (its "
                           "CRC-32 or size differs from the record in state.json)",
                       "it was replaced or damaged: resume from an earlier checkpoint");
      }
    }
  }
  const auto& saved = state["identity"];
  // The most telling difference first: a different model explains a different hidden size.
  // A language model's shape explains a different dataset size (its rows are cut by seq_len).
  for (const std::string key :
       {"model", "model_file", "seq_len", "sequences", "eot_id", "tokenizer", "vocabulary",
        "layers", "d_model", "heads", "dataset", "dataset_size", "training_data",
        "global_batch_size", "optimizer", "seed", "shuffle", "hidden"}) {
    if (!identity.contains(key))
      continue;
    // Checkpoints from before the tokenizer and vocabulary were recorded were byte-tokenised
    // (vocabulary 257, the only choice then): nothing to compare. Older checkpoints did not
    // record their data's digest either.
    if ((key == "tokenizer" || key == "vocabulary" || key == "training_data") &&
        !saved.contains(key))
      continue;
    const auto& value = identity[key];
    if (key == "training_data" && saved[key] != value) {
      const auto dataset = identity.find("dataset");
      bad_checkpoint(
          dir,
          "was written on other training data: '" +
              (dataset != identity.end() && dataset->is_string() ? dataset->get<std::string>()
                                                                 : std::string()) +
              "' has the same samples' count and shape, but their contents changed "
              "(digest " +
              saved[key].dump() + ", now " + value.dump() + ")",
          "resume on the data the run trained on (restore the files), or start a new "
          "run on this data");
    }
    if (!saved.contains(key) || !same_identity_value(key, saved[key], value)) {
      bad_checkpoint(dir,
                     "was written with " + key + " = " +
                         (saved.contains(key) ? saved[key].dump() : "(none)") + ", this run has " +
                         value.dump(),
                     "resume with the same " + key +
                         " (flags override the run's config.toml), or start a new run");
    }
  }
  if (!state.contains("progress"))
    bad_checkpoint(dir, "has no progress counters in state.json",
                   "resume from an earlier checkpoint");
  const TrainingProgress progress = progress_from(state.at("progress"), dir);
  load_weights(dir + "/weights.safetensors", model);
  try {
    torch::serialize::InputArchive archive;
    // The optimizer's state lives where the parameters it updates do (a run on a GPU, or a
    // GPU run resumed on the CPU).
    archive.load_from(dir + "/optimizer.pt", model_device(model));
    optimizer.load(archive);
  } catch (const std::exception& e) {
    bad_checkpoint(dir, "has an unreadable optimizer.pt: " + first_line(e.what()),
                   "resume from an earlier checkpoint");
  }
  if (path_exists(dir + "/rng.safetensors"))
    restore_generator_states(load_safetensors(dir + "/rng.safetensors"), model, dir);
  if (progress.micro_step > 0 && window) {
    if (!state.contains("window") || !state.at("window").is_object()) {
      bad_checkpoint(dir, "is inside a window but its state.json does not describe the window",
                     "resume from an earlier checkpoint");
    }
    const StateFields w(state.at("window"), "window.", dir);
    window->micro_batch_size = w.count("micro_batch_size", 1);
    window->world_size = w.count("world_size", 1);
    window->micro_batch_tokens = w.count("micro_batch_tokens", 0, 0);
    WindowState& partial = window->window;
    partial.micro_steps = w.count("micro_steps", 1);
    partial.counts.items = w.count("items");
    partial.counts.samples = w.count("samples", 0, partial.counts.items);
    partial.counts.loss_sum = w.amount("loss_sum", std::nullopt, /*signed_value=*/true);
    partial.counts.correct = w.count("correct");
    partial.first_items = w.count("first_items", 0, 0);
    partial.first_sq_norm = w.amount("first_sq_norm", 0.0);
    if (partial.micro_steps != progress.micro_step)
      w.bad("micro_steps", "is not progress.micro_step " + std::to_string(progress.micro_step));
    if (partial.counts.correct > partial.counts.items)
      w.bad("correct", "is past window.items " + std::to_string(partial.counts.items));
    if (partial.first_items > partial.counts.items)
      w.bad("first_items", "is past window.items " + std::to_string(partial.counts.items));
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

nlohmann::json progress_to_json(const TrainingProgress& progress) {
  return progress_json(progress);
}

TrainingProgress progress_from_json(const nlohmann::json& json, const std::string& source) {
  return progress_from(json, source);
}

TrainingSnapshot TrainingSnapshot::take(torch::nn::Module& model,
                                        torch::optim::Optimizer& optimizer,
                                        const TrainingProgress& at) {
  TrainingSnapshot snapshot;
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, tensor] : model_state(model))
      snapshot.model_state_.push_back(tensor.detach().clone());
  }
  snapshot.optimizer_ = optimizer_state_bytes(optimizer);
  snapshot.generators_ = generator_states(model);
  snapshot.at_ = at;
  return snapshot;
}

void TrainingSnapshot::restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                               TrainingProgress& at) const {
  {
    torch::NoGradGuard no_grad;
    const NamedTensors live = model_state(model);
    BB_INTERNAL_ASSERT(live.size() == model_state_.size(), "a snapshot of another model");
    for (size_t i = 0; i < live.size(); ++i)
      live[i].second.copy_(model_state_[i]);
  }
  load_optimizer_state_bytes(optimizer, optimizer_, model_device(model));
  restore_generator_states(generators_, model, "(in memory)");
  at = at_;
}

}  // namespace bigbatch
