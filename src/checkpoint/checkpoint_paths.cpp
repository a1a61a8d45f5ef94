#include "checkpoint/checkpoint_paths.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

namespace bigbatch {

namespace fs = std::filesystem;

namespace {
constexpr const char* kPrefix = "step_";
}

std::string checkpoint_directory_name(int64_t step, int64_t micro_step) {
  char name[48];
  if (micro_step > 0) {
    std::snprintf(name, sizeof name, "%s%06lld_%04lld", kPrefix, static_cast<long long>(step),
                  static_cast<long long>(micro_step));
  } else {
    std::snprintf(name, sizeof name, "%s%06lld", kPrefix, static_cast<long long>(step));
  }
  return name;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code error;
  if (!fs::is_directory(root, error))
    return found;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    // Temporary directories (".tmp-step_N-PID") are skipped: only a rename completes one.
    if (name.rfind(kPrefix, 0) != 0 || !fs::exists(entry.path() / "state.json"))
      continue;
    // step_000123 or step_000123_0005 (mid-window): digits only, or it is not ours.
    const auto parts = split(name.substr(std::string(kPrefix).size()), '_');
    const auto all_digits = [](const std::string& s) {
      return !s.empty() && s.size() < 12 && std::all_of(s.begin(), s.end(), ::isdigit);
    };
    if (parts.size() > 2 || !std::all_of(parts.begin(), parts.end(), all_digits))
      continue;
    const int64_t micro = parts.size() == 2 ? std::stoll(parts[1]) : 0;
    if (micro >= 1000000)
      continue;
    found.emplace_back(std::stoll(parts[0]) * 1000000 + micro, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string find_latest_checkpoint(const std::string& path) {
  if (path_exists(path + "/state.json"))
    return path;
  std::error_code error;
  if (!fs::is_directory(path, error)) {
    throw Error(ErrorKind::Format, "--resume '" + path + "' is not a directory",
                "pass a run directory or one of its checkpoints/step_N directories");
  }
  const auto all = list_checkpoints(path);
  if (all.empty()) {
    throw Error(ErrorKind::Format, "run directory '" + path + "' has no complete checkpoint",
                "train with --checkpoint-every to write checkpoints, or start a new run");
  }
  return all.back().second;
}

int64_t remove_checkpoint_leftovers(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code error;
  if (!fs::is_directory(root, error))
    return 0;
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-step", 0) == 0 || name.rfind(".trash-", 0) == 0)
      leftovers.push_back(entry.path());
  }
  for (const auto& path : leftovers) {
    fs::remove_all(path, error);
    if (error) {
      throw Error(
          ErrorKind::Io,
          "cannot remove '" + path.string() + "', left by an interrupted run: " + error.message(),
          "check the permissions of the run directory");
    }
  }
  return static_cast<int64_t>(leftovers.size());
}

std::vector<std::string> newer_checkpoints(const std::string& checkpoint_dir) {
  std::vector<std::string> newer;
  bool after = false;
  std::error_code error;
  for (const auto& [key, path] : list_checkpoints(run_directory_of_checkpoint(checkpoint_dir))) {
    if (after)
      newer.push_back(path);
    else if (fs::equivalent(path, checkpoint_dir, error))
      after = true;
  }
  return newer;
}

std::string set_checkpoints_aside(const std::string& run_dir,
                                  const std::vector<std::string>& checkpoints,
                                  const std::string& name) {
  const std::string aside = run_dir + "/abandoned/" + name;
  ensure_directory(aside);
  for (const auto& path : checkpoints) {
    std::error_code error;
    fs::rename(path, fs::path(aside) / fs::path(path).filename(), error);
    if (error) {
      throw Error(ErrorKind::Io,
                  "cannot move '" + path + "' aside to '" + aside + "': " + error.message(),
                  "check the permissions of the run directory");
    }
  }
  return aside;
}

std::string run_directory_of_checkpoint(const std::string& checkpoint_dir) {
  fs::path p = fs::path(checkpoint_dir).lexically_normal();
  if (!p.has_filename())
    p = p.parent_path();  // a trailing slash
  return p.parent_path().parent_path().string();
}

RunWeights find_run_weights(const std::string& path) {
  RunWeights found;
  const bool checkpoint = path_exists(path + "/state.json");
  found.run_dir = checkpoint ? run_directory_of_checkpoint(path) : path;
  if (!path_exists(found.run_dir + "/config.toml")) {
    throw Error(ErrorKind::Io,
                checkpoint ? "checkpoint '" + path + "' is not inside a run directory (no '" +
                                 found.run_dir + "/config.toml')"
                           : "'" + path + "' is not a run directory (no config.toml)",
                "give the directory a bigbatch train run wrote, or one of its checkpoints");
  }
  if (checkpoint) {
    found.weights = path + "/weights.safetensors";
    found.note = "the weights of checkpoint '" + path + "'";
    return found;
  }
  if (path_exists(path + "/weights.safetensors")) {
    found.weights = path + "/weights.safetensors";
    return found;
  }
  const auto all = list_checkpoints(path);
  if (all.empty()) {
    throw Error(ErrorKind::Io,
                "run '" + path +
                    "' has no weights.safetensors (it did not finish) and no complete checkpoint",
                "resume it to its end with bigbatch train --resume " + path +
                    ", or give a run that finished");
  }
  found.weights = all.back().second + "/weights.safetensors";
  found.note = "run '" + path +
               "' did not finish (no weights.safetensors): using its newest "
               "checkpoint, '" +
               all.back().second + "'";
  return found;
}

}  // namespace bigbatch
