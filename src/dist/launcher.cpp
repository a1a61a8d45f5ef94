#include "dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/text.h"
#include "runtime/runtime_env.h"

namespace bigbatch {

void LaunchOptions::validate() const {
  auto check = [](bool ok, const std::string& problem, const std::string& hint) {
    if (!ok)
      throw Error(ErrorKind::Usage, problem, hint);
  };
  check(nproc >= 1, "--nproc must be at least 1, got " + std::to_string(nproc), "e.g. --nproc 2");
  check(nnodes >= 1, "--nnodes must be at least 1, got " + std::to_string(nnodes),
        "e.g. --nnodes 2");
  check(node_rank >= 0 && node_rank < nnodes,
        "--node-rank " + std::to_string(node_rank) + " is not below --nnodes " +
            std::to_string(nnodes),
        "node ranks run from 0 to nnodes - 1");
  check(master_port >= 1 && master_port <= 65535,
        "--master-port " + std::to_string(master_port) + " is not a TCP port",
        "use 1 to 65535, e.g. 29500");
  check(!master_addr.empty(), "--master-addr is empty", "e.g. --master-addr 127.0.0.1");
  // NaN fails both comparisons.
  check(grace_seconds >= 0 && grace_seconds <= 3600,
        "--grace-seconds must be from 0 to 3600, got " + format_double(grace_seconds),
        "e.g. --grace-seconds 5");
  check(!command.empty(), "no command to launch",
        "write it after --, e.g. bigbatch launch --nproc 2 -- bigbatch train");
}

namespace {

volatile std::sig_atomic_t g_signals_received = 0;
volatile std::sig_atomic_t g_last_signal = 0;

void on_signal(int signal_number) {
  g_last_signal = signal_number;
  g_signals_received = g_signals_received + 1;
}

struct Stream {
  int fd = -1;
  std::FILE* sink = nullptr;
  std::string pending;  // a line not yet terminated
};

struct Worker {
  int64_t rank = 0;
  int64_t local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out;
  Stream err;
  std::string last_error_line;
};

void emit(Worker& worker, Stream& stream, bool flush_partial) {
  size_t newline;
  while ((newline = stream.pending.find('\n')) != std::string::npos) {
    std::string line = stream.pending.substr(0, newline);
    stream.pending.erase(0, newline + 1);
    // A progress bar's carriage returns would overwrite the prefix; keep the last state.
    const auto carriage = line.rfind('\r');
    if (carriage != std::string::npos)
      line = line.substr(carriage + 1);
    std::fprintf(stream.sink, "[rank %lld] %s\n", static_cast<long long>(worker.rank),
                 line.c_str());
    if (&stream == &worker.err && !line.empty())
      worker.last_error_line = line;
  }
  if (flush_partial && !stream.pending.empty()) {
    stream.pending += '\n';
    emit(worker, stream, false);
  }
  std::fflush(stream.sink);
}

std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

bool failed(int status) {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int exit_code_for(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

// This process's own executable, from the kernel (empty if it cannot say).
std::string own_executable() {
  std::string path(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0)
    return {};
  path.resize(static_cast<size_t>(n));
  return path;
}

pid_t spawn(const LaunchOptions& options, Worker& worker, int64_t threads_per_worker) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw Error(ErrorKind::Io,
                std::string("cannot create pipes for the workers: ") + std::strerror(errno),
                "check the process's open-file limit");
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(ErrorKind::Io, std::string("cannot start a worker: ") + std::strerror(errno),
                "check the process limit and free memory");
  }
  if (pid == 0) {
    // The child: its own process group, so a terminal's Ctrl-C reaches it only through the
    // launcher's forwarding (once), not twice.
    ::setpgid(0, 0);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    const int64_t world = options.nproc * options.nnodes;
    ::setenv("RANK", std::to_string(worker.rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(worker.local_rank).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
    ::setenv("GROUP_RANK", std::to_string(options.node_rank).c_str(), 1);
    ::setenv("MASTER_ADDR", options.master_addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(options.master_port).c_str(), 1);
    // Workers sharing a machine share its cores: without this, 4 workers x 2 threads fight
    // over 2 cores.
    ::setenv("OMP_NUM_THREADS", std::to_string(threads_per_worker).c_str(), /*overwrite=*/0);
    // How this job is started again, for a worker's "continue with" line after Ctrl-C.
    ::setenv(kRelaunchVariable, relaunch_prefix(options).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& arg : options.command)
      argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "bigbatch launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  // Also set here: whichever of parent and child runs first, the group exists before any signal.
  ::setpgid(pid, pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  worker.out.fd = out_pipe[0];
  worker.err.fd = err_pipe[0];
  return pid;
}

// Signals each running worker's whole process group, so that whatever the worker started
// (a shell's children, say) stops with it and releases its output pipes.
void signal_all(std::vector<Worker>& workers, int signal_number) {
  for (const auto& w : workers) {
    if (w.running)
      ::kill(-w.pid, signal_number);
  }
}

}  // namespace

std::string relaunch_prefix(const LaunchOptions& options) {
  std::string prefix = "bigbatch launch --nproc " + std::to_string(options.nproc);
  if (options.nnodes > 1) {
    prefix += " --nnodes " + std::to_string(options.nnodes) + " --node-rank " +
              std::to_string(options.node_rank) + " --master-addr " + options.master_addr +
              " --master-port " + std::to_string(options.master_port);
  }
  return prefix;
}

int run_launcher(const LaunchOptions& given) {
  given.validate();
  // `-- bigbatch train ...` runs the launcher's own build, on PATH or not: the workers and the
  // launcher are one version (as torchrun's workers run its Python). Resolved before forking.
  LaunchOptions options = given;
  if (options.command.front() == "bigbatch") {
    if (const std::string self = own_executable(); !self.empty())
      options.command.front() = self;
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  const int64_t threads_per_worker = std::max<int64_t>(1, available_cpus() / options.nproc);
  std::vector<Worker> workers(static_cast<size_t>(options.nproc));
  for (int64_t i = 0; i < options.nproc; ++i) {
    Worker& w = workers[static_cast<size_t>(i)];
    w.local_rank = i;
    w.rank = options.node_rank * options.nproc + i;
    w.out.sink = stdout;
    w.err.sink = stderr;
    w.pid = spawn(options, w, threads_per_worker);
    w.running = true;
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const Worker* first_failure = nullptr;
  // A worker that exited 0 while the others still ran: if they fail after it, it is the likely
  // cause (it left the job), and the report names it (issue 21).
  const Worker* left_early = nullptr;
  double left_at_seconds = 0;
  std::optional<Clock::time_point> kill_deadline;
  std::optional<Clock::time_point> drain_deadline;
  int forwarded_signals = 0;
  char buffer[65536];
  while (true) {
    // Forward signals: the first asks workers to stop, a second kills them.
    while (forwarded_signals < g_signals_received) {
      ++forwarded_signals;
      if (forwarded_signals == 1) {
        signal_all(workers, g_last_signal);
        kill_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.grace_seconds));
      } else {
        signal_all(workers, SIGKILL);
      }
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Stream*>> owners;
    for (auto& w : workers) {
      for (Stream* s : {&w.out, &w.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&w, s);
        }
      }
    }
    const bool any_running =
        std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.running; });
    if (fds.empty() && !any_running)
      break;
    // Every worker is gone but something they started still holds a pipe: after the grace
    // period, stop reading (its process group was signalled with the worker).
    if (!any_running) {
      if (!drain_deadline) {
        drain_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(options.grace_seconds));
      } else if (Clock::now() > *drain_deadline) {
        for (auto& [worker, stream] : owners) {
          ::close(stream->fd);
          stream->fd = -1;
          emit(*worker, *stream, true);
        }
        break;
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), 100);
    if (ready > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
          continue;
        auto [worker, stream] = owners[i];
        const ssize_t n = ::read(stream->fd, buffer, sizeof buffer);
        if (n > 0) {
          stream->pending.append(buffer, static_cast<size_t>(n));
          emit(*worker, *stream, false);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          ::close(stream->fd);
          stream->fd = -1;
          emit(*worker, *stream, true);
        }
      }
    }
    // Reap whatever has exited.
    for (auto& w : workers) {
      if (!w.running)
        continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.running = false;
        w.status = status;
        const bool others_running =
            std::any_of(workers.begin(), workers.end(), [](const Worker& o) { return o.running; });
        if (!failed(status) && others_running && !left_early && !first_failure &&
            g_signals_received == 0) {
          left_early = &w;
          left_at_seconds = std::chrono::duration<double>(Clock::now() - start).count();
        }
        // Workers stopping because the launcher forwarded a signal are not failures.
        if (failed(status) && !first_failure && g_signals_received == 0) {
          first_failure = &w;
          std::fprintf(stderr, "bigbatch launch: rank %lld %s; stopping the other workers\n",
                       static_cast<long long>(w.rank), describe_status(status).c_str());
          signal_all(workers, SIGTERM);
          kill_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options.grace_seconds));
        }
      }
    }
    if (kill_deadline && Clock::now() > *kill_deadline) {
      signal_all(workers, SIGKILL);
      kill_deadline.reset();
    }
  }

  if (first_failure) {
    // Drain any last error line that arrived after the exit was seen.
    std::string left;
    if (left_early) {
      char text[160];
      std::snprintf(text, sizeof text,
                    " (rank %lld had exited with code 0 at %.1f s, while the others still ran: "
                    "it left the job early)",
                    static_cast<long long>(left_early->rank), left_at_seconds);
      left = text;
    }
    std::fprintf(stderr, "bigbatch: error[distributed]: rank %lld failed (%s)%s%s%s\n",
                 static_cast<long long>(first_failure->rank),
                 describe_status(first_failure->status).c_str(),
                 first_failure->last_error_line.empty() ? "" : ": ",
                 first_failure->last_error_line.c_str(), left.c_str());
    return exit_code_for(first_failure->status);
  }
  if (g_signals_received > 0)
    return 128 + static_cast<int>(g_last_signal);
  return 0;
}

}  // namespace bigbatch
