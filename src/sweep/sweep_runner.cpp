#include "sweep/sweep_runner.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "config/option_table.h"
#include "config/train_config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "runtime/interrupts.h"
#include "sweep/sweep_summary.h"

namespace bigbatch {

std::vector<std::string> sweep_cell_command(const SweepOptions& o, const SweepCell& cell,
                                            const std::string& dir) {
  if (path_exists(dir + "/checkpoints")) {
    // Continue where the interrupted cell left off (its own config.toml holds its settings).
    return {o.binary, "train", "--resume", dir, "--progress", "lines"};
  }
  return {o.binary,
          "train",
          "--config",
          o.out + "/base.toml",
          "--global-batch",
          std::to_string(cell.global_batch),
          "--micro-batch",
          std::to_string(cell.micro_batch(o.micro_batch)),
          "--lr-scaling",
          cell.lr_scaling,
          "--warmup",
          cell.warmup,
          "--epochs",
          std::to_string(o.max_epochs),
          "--target",
          o.target.to_string(),
          "--checkpoint-every",
          "1e",
          "--threads",
          std::to_string(o.threads_per_cell),
          "--progress",
          "lines",
          "--out",
          dir};
}

namespace {

pid_t start_cell(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    throw Error(ErrorKind::Io, "cannot write '" + log_path + "': " + std::strerror(errno),
                "check that the sweep directory is writable");
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw Error(ErrorKind::Io, std::string("cannot start a cell: ") + std::strerror(errno),
                "lower --jobs");
  }
  if (pid == 0) {
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log);
  return pid;
}

int exit_code_of(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(const CellResult& r, const StopTarget& target) {
  std::string text = r.reached ? "reached after " + std::to_string(r.updates_to_target) +
                                     " updates (" + human_duration(r.seconds_to_target) + ")"
                               : "target not reached";
  if (r.best)
    text += ", best " + metric_text(target, *r.best);
  return text;
}

// `failures`: the exit codes of this sweep's runs (by directory name) that failed on bad input or
// a bug (not a signal, not divergence, which the run's own files tell). A cell that shares
// another's run has its result, under its own rule's name.
void write_summaries(const SweepOptions& o, const std::vector<SweepCell>& cells,
                     const std::map<std::string, int>& failures) {
  std::vector<CellResult> results;
  for (const SweepCell& cell : cells) {
    results.push_back(read_cell_result(cell, o.out + "/" + cell.run_name(), o.target));
    if (const auto f = failures.find(cell.run_name());
        f != failures.end() && results.back().status != "diverged")
      results.back().status = "failed (exit " + std::to_string(f->second) + ")";
  }
  atomic_write_file(o.out + "/summary.csv", summary_csv(results), Links::Replace);
  const std::string markdown = summary_markdown(results, o.target);
  atomic_write_file(o.out + "/summary.md", markdown, Links::Replace);
  atomic_write_file(o.out + "/report.html",
                    sweep_report_html(results, o.target, "bigbatch sweep: " + o.out),
                    Links::Replace);
  std::printf("%s", markdown.c_str());
  std::printf("sweep: wrote %s/summary.csv, summary.md and report.html\n", o.out.c_str());
}

// The grid and target, so that `bigbatch report` can rebuild the summaries later; and what a
// rerun into the same directory must repeat to continue it (the cells' epochs and micro-batch).
std::string grid_json(const SweepOptions& o) {
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& cell : o.grid.cells()) {
    nlohmann::json described = {{"global_batch", cell.global_batch},
                                {"lr_scaling", cell.lr_scaling},
                                {"warmup", cell.warmup}};
    if (!cell.same_as.empty())
      described["same_as"] = cell.same_as;
    cells.push_back(described);
  }
  return nlohmann::json{{"target", o.target.to_string()},
                        {"max_epochs", o.max_epochs},
                        {"micro_batch", o.micro_batch},
                        {"cells", cells}}
             .dump(2) +
         "\n";
}

// "--global-batch 64,128,256 --lr-scaling linear --warmup 0u --target 'accuracy>=0.6'
// --max-epochs 3 --micro-batch 32": a recorded grid in the words of the sweep's flags.
std::string describe_grid(const nlohmann::json& grid) {
  const auto text_of = [](const nlohmann::json& value) {
    return value.is_string() ? value.get_ref<const std::string&>() : value.dump();
  };
  const auto distinct = [&](const char* key) {
    std::vector<std::string> values;
    const nlohmann::json cells = grid.contains("cells") ? grid.at("cells") : nlohmann::json();
    for (const auto& cell : cells) {
      const std::string text = cell.contains(key) ? text_of(cell.at(key)) : "?";
      if (std::find(values.begin(), values.end(), text) == values.end())
        values.push_back(text);
    }
    std::string joined;
    for (const auto& v : values)
      joined += (joined.empty() ? "" : ",") + v;
    return joined;
  };
  std::string text = "--global-batch " + distinct("global_batch") + " --lr-scaling " +
                     distinct("lr_scaling") + " --warmup " + distinct("warmup");
  if (grid.contains("target"))
    text += " --target '" + text_of(grid.at("target")) + "'";
  if (grid.contains("max_epochs"))
    text += " --max-epochs " + grid.at("max_epochs").dump();
  if (grid.contains("micro_batch"))
    text += " --micro-batch " + grid.at("micro_batch").dump();
  return text;
}

}  // namespace

// (A sweep.json from before max_epochs and micro_batch were recorded is compared on what it
// holds.)
void check_rerun_is_the_same_sweep(const SweepOptions& o) {
  const std::string grid_path = o.out + "/sweep.json";
  if (path_exists(grid_path)) {
    auto recorded = nlohmann::json::parse(read_text_file(grid_path, kMaxConfigFileBytes), nullptr,
                                          /*allow_exceptions=*/false);
    if (!recorded.is_object()) {
      throw Error(ErrorKind::Format, "'" + grid_path + "' does not describe a sweep's grid",
                  "give the sweep another --out (this directory's sweep.json is damaged)");
    }
    auto wanted = nlohmann::json::parse(grid_json(o));
    for (const char* key : {"max_epochs", "micro_batch"}) {
      if (!recorded.contains(key))
        wanted.erase(key);
    }
    // Which cells share a run is derived from the grid (and older sweeps did not record it).
    for (auto* grid : {&recorded, &wanted}) {
      if (grid->contains("cells") && (*grid)["cells"].is_array()) {
        for (auto& cell : (*grid)["cells"]) {
          if (cell.is_object())
            cell.erase("same_as");
        }
      }
    }
    if (recorded.contains("target_accuracy") && recorded["target_accuracy"].is_number() &&
        !recorded.contains("target"))
      recorded["target"] =
          StopTarget::accuracy(recorded.at("target_accuracy").get<double>()).to_string();
    recorded.erase("target_accuracy");
    if (recorded != wanted) {
      throw Error(ErrorKind::Config,
                  "'" + o.out + "' holds another sweep (" + describe_grid(recorded) +
                      "), not this one (" + describe_grid(wanted) + ")",
                  "give the same flags to continue that sweep, or another --out for this one");
    }
  }
  const std::string base_path = o.out + "/base.toml";
  if (path_exists(base_path)) {
    // Read and written again, so that an older version's rendering of the same settings (keys
    // it did not have yet, relative paths) compares equal. (Not complete_older_run(): base.toml's
    // `auto` rule is the cells' to resolve, not an older run's.)
    TrainConfig recorded_config;
    load_toml_config(recorded_config, base_path);
    const std::string recorded = render_toml_config(recorded_config.with_absolute_paths());
    if (recorded != o.base_config) {
      const auto before = split(recorded, '\n');
      const auto now = split(o.base_config, '\n');
      size_t i = 0;
      while (i < before.size() && i < now.size() && before[i] == now[i])
        ++i;
      const std::string there = i < before.size() ? "'" + before[i] + "'" : "nothing";
      const std::string here = i < now.size() ? "'" + now[i] + "'" : "nothing";
      throw Error(ErrorKind::Config,
                  "'" + base_path + "' holds other settings than this command's: " + there +
                      " there, " + here + " here",
                  "give the same flags to continue that sweep, or another --out for this one");
    }
  }
}

bool rewrite_sweep_report(const std::string& dir) {
  const std::string path = dir + "/sweep.json";
  if (!path_exists(path))
    return false;
  const auto grid = nlohmann::json::parse(read_text_file(path, kMaxConfigFileBytes), nullptr,
                                          /*allow_exceptions=*/false);
  std::vector<SweepCell> cells;
  SweepOptions o;
  o.out = dir;
  try {
    // A sweep.json from before general targets holds the accuracy alone.
    o.target = grid.contains("target")
                   ? StopTarget::parse(grid.at("target").get<std::string>())
                   : StopTarget::accuracy(grid.at("target_accuracy").get<double>());
    for (const auto& c : grid.at("cells")) {
      cells.push_back({c.at("global_batch").get<int64_t>(), c.at("lr_scaling").get<std::string>(),
                       c.at("warmup").get<std::string>(),
                       c.contains("same_as") ? c.at("same_as").get<std::string>() : std::string()});
    }
  } catch (const std::exception&) {
    throw Error(ErrorKind::Format, "'" + path + "' does not describe a sweep's grid",
                "run the sweep command again with the same --out: it rewrites it");
  }
  write_summaries(o, cells, {});
  return true;
}

int run_sweep(const SweepOptions& o) {
  ensure_directory(o.out);
  ensure_directory(o.out + "/logs");
  // The cells of a sweep share one base configuration (check_rerun_is_the_same_sweep has
  // refused another).
  atomic_write_file(o.out + "/base.toml", o.base_config, Links::Replace);
  atomic_write_file(o.out + "/sweep.json", grid_json(o), Links::Replace);

  const std::vector<SweepCell> cells = o.grid.cells();
  std::vector<size_t> pending;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!cells[i].same_as.empty()) {
      std::fprintf(stderr,
                   "sweep: [%zu/%zu] %s: the same run as %s (at the reference batch every rule "
                   "but adascale trains at the base rate)\n",
                   i + 1, cells.size(), cells[i].name().c_str(), cells[i].same_as.c_str());
      continue;
    }
    const std::string dir = o.out + "/" + cells[i].name();
    const std::string earlier = read_cell_result(cells[i], dir, o.target).status;
    if (earlier == "done" || earlier == "diverged") {
      // A diverged cell would diverge again from its checkpoint: its result is the divergence.
      std::fprintf(stderr, "sweep: [%zu/%zu] %s: %s earlier, kept\n", i + 1, cells.size(),
                   cells[i].name().c_str(), earlier == "done" ? "finished" : "diverged");
      continue;
    }
    if (path_exists(dir) && !path_exists(dir + "/checkpoints"))
      std::filesystem::remove_all(dir);  // started, but left nothing to continue from
    pending.push_back(i);
  }

  InterruptGuard interrupts;
  std::map<pid_t, size_t> running;
  int first_failure = 0;
  std::map<std::string, int> failures;
  size_t next = 0;
  while (next < pending.size() || !running.empty()) {
    while (!interrupts.requested() && next < pending.size() && int64_t(running.size()) < o.jobs) {
      const size_t i = pending[next++];
      const std::string dir = o.out + "/" + cells[i].name();
      const bool resumed = path_exists(dir + "/checkpoints");
      const pid_t pid = start_cell(sweep_cell_command(o, cells[i], dir),
                                   o.out + "/logs/" + cells[i].name() + ".log");
      running[pid] = i;
      std::fprintf(stderr, "sweep: [%zu/%zu] %s: %s (global batch %lld, %s)\n", i + 1, cells.size(),
                   cells[i].name().c_str(), resumed ? "resumed" : "started",
                   static_cast<long long>(cells[i].global_batch), cells[i].series().c_str());
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) {
        // A signal: the cells share our process group when it came from the terminal; pass
        // it on in case it was sent to the sweep alone. Each cell checkpoints and stops.
        for (const auto& [child, index] : running)
          ::kill(child, interrupts.requested() ? interrupts.signal_number() : SIGTERM);
        continue;
      }
      break;
    }
    const auto found = running.find(pid);
    if (found == running.end())
      continue;
    const size_t i = found->second;
    running.erase(found);
    const int code = exit_code_of(status);
    const CellResult r = read_cell_result(cells[i], o.out + "/" + cells[i].name(), o.target);
    if (code == 0) {
      std::fprintf(stderr, "sweep: [%zu/%zu] %s: %s\n", i + 1, cells.size(),
                   cells[i].name().c_str(), describe(r, o.target).c_str());
    } else if (code > 128 && interrupts.requested()) {
      // Stopped with the sweep (Ctrl-C reaches the cells too): it checkpointed, not failed.
      std::fprintf(stderr, "sweep: [%zu/%zu] %s: stopped by signal %d after checkpointing\n", i + 1,
                   cells.size(), cells[i].name().c_str(), code - 128);
      if (first_failure == 0)
        first_failure = code;
    } else {
      std::fprintf(stderr, "sweep: [%zu/%zu] %s: %s with exit code %d, see %s/logs/%s.log\n", i + 1,
                   cells.size(), cells[i].name().c_str(),
                   r.status == "diverged" ? "diverged" : "failed", code, o.out.c_str(),
                   cells[i].name().c_str());
      if (first_failure == 0)
        first_failure = code;
      if (code < 128)
        failures[cells[i].name()] = code;
    }
  }
  write_summaries(o, cells, failures);
  if (interrupts.requested()) {
    std::fprintf(stderr, "sweep: stopped by signal %d; run the same command again to continue it\n",
                 interrupts.signal_number());
    return 128 + interrupts.signal_number();
  }
  return first_failure;
}

}  // namespace bigbatch
