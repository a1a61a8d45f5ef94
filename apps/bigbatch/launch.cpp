// `bigbatch launch`: start and supervise the local workers of a data-parallel job.
#include "commands.h"
#include "core/text.h"
#include "dist/launcher.h"
#include "subcommand.h"

namespace bigbatch::cli {

namespace {

class LaunchCommand final : public Subcommand {
 public:
  LaunchCommand(CLI::App& parent, const std::vector<std::string>& worker_command)
      : Subcommand(parent, "launch",
                   "start and supervise the local workers of a data-parallel job: launch --nproc "
                   "N -- COMMAND...") {
    options_.command = worker_command;
    // torchrun's spellings too, so that a torchrun command line works with `launch`.
    app()
        .add_option("--nproc,--nproc-per-node,--nproc_per_node", options_.nproc,
                    "workers on this machine")
        ->required();
    app().add_option("--nnodes", options_.nnodes, "machines in the job (default 1)");
    app().add_option("--node-rank,--node_rank", options_.node_rank,
                     "this machine's index, 0 to nnodes - 1 (default 0)");
    app().add_option("--master-addr,--master_addr", options_.master_addr,
                     "rank 0's host (default 127.0.0.1)");
    app().add_option("--master-port,--master_port", options_.master_port,
                     "rank 0's rendezvous port (default 29500)");
    app()
        .add_option_function<std::string>(
            "--rdzv-endpoint,--rdzv_endpoint",
            [this](const std::string& endpoint) { set_endpoint(endpoint); },
            "HOST:PORT of the rendezvous (torchrun's spelling of --master-addr and --master-port)")
        ->excludes("--master-addr")
        ->excludes("--master-port");
    app().add_option(
        "--grace-seconds", options_.grace_seconds,
        "after a failure, seconds the other workers get to stop before SIGKILL (default 5)");
    app().footer(
        "The worker command follows --, e.g. bigbatch launch --nproc 4 -- bigbatch train "
        "--global-batch 1024");
  }

  int run() override { return run_launcher(options_); }

 private:
  void set_endpoint(const std::string& endpoint) {
    const auto colon = endpoint.rfind(':');
    const auto port =
        colon == std::string::npos ? std::nullopt : parse_int(endpoint.substr(colon + 1));
    if (colon == 0 || !port) {  // CLI11's own error type: reported like any bad flag
      throw CLI::ValidationError(
          "--rdzv-endpoint", "must be HOST:PORT (e.g. 127.0.0.1:29500), got '" + endpoint + "'");
    }
    std::string host = endpoint.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);  // torchrun's bracketed IPv6: [::1]:29500
    options_.master_addr = host;
    options_.master_port = *port;
  }

  LaunchOptions options_;
};

}  // namespace

std::unique_ptr<Subcommand> make_launch_command(CLI::App& parent,
                                                const std::vector<std::string>& worker_command) {
  return std::make_unique<LaunchCommand>(parent, worker_command);
}

}  // namespace bigbatch::cli
