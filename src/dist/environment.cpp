#include "dist/environment.h"

#include <cstdlib>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

std::optional<std::string> process_environment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (!value)
    return std::nullopt;
  return std::string(value);
}

namespace {

struct RankVariables {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

// In order of precedence: a torchrun-style launcher inside an mpirun or srun allocation wins.
constexpr RankVariables kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

[[noreturn]] void bad_environment(const std::string& problem, const std::string& hint) {
  throw Error(ErrorKind::Distributed, problem, hint);
}

int64_t read_integer(const EnvironmentLookup& lookup, const char* name, int64_t fallback,
                     bool required) {
  const auto text = lookup(name);
  if (!text) {
    if (required) {
      bad_environment(
          std::string(name) + " is not set",
          "launch with 'bigbatch launch', or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
    }
    return fallback;
  }
  const auto value = parse_int(*text);
  if (!value || *value < 0) {
    bad_environment(std::string(name) + "='" + *text + "' is not a non-negative integer",
                    "check the launcher's environment");
  }
  return *value;
}

}  // namespace

std::optional<DistEnvironment> read_dist_environment(const EnvironmentLookup& lookup) {
  const RankVariables* launcher = nullptr;
  for (const auto& candidate : kLaunchers) {
    if (lookup(candidate.rank) || lookup(candidate.world_size)) {
      launcher = &candidate;
      break;
    }
  }
  if (!launcher)
    return std::nullopt;

  DistEnvironment env;
  env.source = launcher->source;
  env.relaunch = lookup("BIGBATCH_RELAUNCH").value_or("");
  env.rank = read_integer(lookup, launcher->rank, 0, /*required=*/true);
  env.world_size = read_integer(lookup, launcher->world_size, 1, /*required=*/true);
  env.local_rank = read_integer(lookup, launcher->local_rank, env.rank, /*required=*/false);
  if (env.world_size < 1)
    bad_environment(std::string(launcher->world_size) + " must be at least 1",
                    "check the launcher");
  if (env.rank >= env.world_size) {
    bad_environment(std::string(launcher->rank) + "=" + std::to_string(env.rank) +
                        " is not below " + launcher->world_size + "=" +
                        std::to_string(env.world_size),
                    "ranks run from 0 to WORLD_SIZE - 1");
  }
  if (env.world_size == 1)
    return env;

  const auto addr = lookup("MASTER_ADDR");
  if (!addr || trim(*addr).empty()) {
    bad_environment(
        "MASTER_ADDR is not set for a world of " + std::to_string(env.world_size) + " ranks",
        "set MASTER_ADDR to rank 0's host (e.g. 127.0.0.1 on one machine)");
  }
  env.master_addr = trim(*addr);
  const auto port_text = lookup("MASTER_PORT");
  if (!port_text) {
    bad_environment(
        "MASTER_PORT is not set for a world of " + std::to_string(env.world_size) + " ranks",
        "set MASTER_PORT to a free TCP port on rank 0's host, e.g. 29500");
  }
  const auto port = parse_int(*port_text);
  if (!port || *port < 1 || *port > 65535) {
    bad_environment("MASTER_PORT='" + *port_text + "' is not a TCP port",
                    "use a number from 1 to 65535, e.g. 29500");
  }
  env.master_port = *port;
  env.agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  return env;
}

}  // namespace bigbatch
