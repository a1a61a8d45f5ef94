// bigbatch: train with any effective batch on any memory budget (see README.md).
#include "commands.h"
#include "runtime/runtime_env.h"

int main(int argc, char** argv) {
  // Before anything else: may re-execute the binary with OpenBLAS/OpenMP settings fixed.
  bigbatch::prepare_runtime_environment(argv);
  return bigbatch::cli::run(argc, argv);
}
