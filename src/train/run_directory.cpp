#include "train/run_directory.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "core/error.h"
#include "core/text.h"
#include "report/run_records.h"

namespace bigbatch {

std::string default_run_timestamp() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return stamp;
}

void refuse_used_run_directory(const std::string& dir, LockHeld held) {
  for (const char* file : {"metrics.jsonl", "weights.safetensors", "config.toml"}) {
    if (path_exists(dir + "/" + file)) {
      if (held == LockHeld::No)
        DirectoryLock::refuse_if_held(dir);
      throw Error(ErrorKind::Io, "run directory '" + dir + "' already holds a run (" + file + ")",
                  "choose another --out, or delete that directory");
    }
  }
}

std::unique_ptr<DirectoryLock> prepare_run_directory(const std::string& dir) {
  ensure_directory(dir);
  auto lock = std::make_unique<DirectoryLock>(dir);
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
  if (overrides)
    overrides(config);
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
