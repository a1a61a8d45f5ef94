#include "train/run_directory.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "core/error.h"
#include "core/text.h"
#include "report/run_records.h"
#include "report/tensorboard_log.h"

namespace bigbatch {

std::string default_run_timestamp() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return stamp;
}

namespace {

constexpr const char* kRunFiles[] = {"metrics.jsonl", "weights.safetensors", "config.toml"};

// A run that stopped (killed, or its machine lost) before anything was written to continue
// from: its records but neither a finished run's weights.safetensors nor a complete
// checkpoint. --resume has nothing to resume, and its records would refuse a new run forever.
bool stopped_before_a_checkpoint(const std::string& dir) {
  return !path_exists(dir + "/weights.safetensors") && list_checkpoints(dir).empty();
}

// Moves such a run's records (not the lock, not earlier abandoned ones, not files of others)
// to RUN/abandoned/stopped-before-a-checkpoint-<time>/ and returns that directory.
std::string set_stopped_run_aside(const std::string& dir) {
  remove_checkpoint_leftovers(dir);
  std::error_code ignored;
  std::filesystem::remove(std::filesystem::path(dir) / "checkpoints", ignored);  // when empty
  std::vector<std::string> records;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ignored)) {
    const std::string name = entry.path().filename().string();
    static const char* const kRecords[] = {"metrics.jsonl", "config.toml", "plan.txt",
                                           "report.html", "best.safetensors"};
    const bool record =
        std::find(std::begin(kRecords), std::end(kRecords), name) != std::end(kRecords) ||
        is_bigbatch_event_file(name);
    if (record)
      records.push_back(entry.path().string());
  }
  std::sort(records.begin(), records.end());
  return set_checkpoints_aside(dir, records,
                               "stopped-before-a-checkpoint-" + default_run_timestamp());
}

}  // namespace

void refuse_used_run_directory(const std::string& dir, LockHeld held) {
  for (const char* file : kRunFiles) {
    if (path_exists(dir + "/" + file)) {
      if (held == LockHeld::No)
        DirectoryLock::refuse_if_held(dir);
      if (held == LockHeld::No && stopped_before_a_checkpoint(dir))
        return;  // set aside once the new run holds the lock (prepare_run_directory)
      throw Error(ErrorKind::Io, "run directory '" + dir + "' already holds a run (" + file + ")",
                  "choose another --out, or delete that directory");
    }
  }
}

std::unique_ptr<DirectoryLock> prepare_run_directory(const std::string& dir,
                                                     std::string* set_aside) {
  ensure_directory(dir);
  auto lock = std::make_unique<DirectoryLock>(dir);
  const bool holds_a_run =
      std::any_of(std::begin(kRunFiles), std::end(kRunFiles),
                  [&](const char* file) { return path_exists(dir + "/" + file); });
  if (holds_a_run && stopped_before_a_checkpoint(dir)) {
    const std::string aside = set_stopped_run_aside(dir);
    if (set_aside)
      *set_aside = aside;
  }
  refuse_used_run_directory(dir, LockHeld::Yes);
  return lock;
}

bool keep_metrics_of_checkpoint(const std::string& path, const TrainingProgress& progress) {
  if (!path_exists(path))
    return false;
  const std::string text = read_text_file(path, kMaxMetricsFileBytes);
  const auto length = static_cast<size_t>(std::max<int64_t>(0, progress.metrics_bytes));
  if (progress.metrics_bytes >= 0 && length <= text.size() &&
      (length == 0 || text[length - 1] == '\n')) {
    if (length < text.size())
      atomic_write_file(path, text.substr(0, length), Links::Replace);
    return true;
  }
  std::string kept;
  size_t number = 0;
  for (const auto& line : split(text, '\n')) {
    ++number;
    if (line.empty())
      continue;
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object())
      continue;  // a line cut short by a crash
    check_metrics_record(record, path, number);
    if (record.contains("step") && record["step"].get<int64_t>() > progress.step)
      continue;
    kept += line + "\n";
  }
  atomic_write_file(path, kept, Links::Replace);
  return false;
}

std::string default_run_directory(const std::string& prefix) {
  const std::string stamp = prefix + default_run_timestamp();
  std::string dir = std::string("runs/") + stamp;
  for (int suffix = 2; path_exists(dir); ++suffix)
    dir = std::string("runs/") + stamp + "-" + std::to_string(suffix);
  return dir;
}

TrainConfig resume_configuration(const std::string& path,
                                 const std::function<void(TrainConfig&)>& overrides,
                                 bool init_weights_given, bool out_given) {
  if (init_weights_given) {
    // The checkpoint's weights are where the run stands; others would be silently ignored.
    throw Error(ErrorKind::Usage, "--init-weights cannot be given with --resume",
                "drop --init-weights to continue the run, or start a new run from those weights");
  }
  const std::string checkpoint = find_latest_checkpoint(path);
  const std::string run_dir = run_directory_of_checkpoint(checkpoint);
  TrainConfig config;
  if (path_exists(run_dir + "/config.toml")) {
    load_toml_config(config, run_dir + "/config.toml");
    config.complete_older_run();  // the images as the run normalised them
  }
  const int64_t run_threads = config.threads;
  if (overrides)
    overrides(config);
  config.threads_from_run = run_threads != 0 && config.threads == run_threads;
  if (out_given && config.out != run_dir) {
    throw Error(ErrorKind::Usage,
                "--out cannot move a resumed run (it continues in '" + run_dir + "')",
                "drop --out, or copy the run directory first and resume the copy");
  }
  config.out = run_dir;
  config.resume = checkpoint;
  return config;
}

}  // namespace bigbatch
