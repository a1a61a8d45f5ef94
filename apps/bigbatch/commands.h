#pragma once
// The bigbatch command line: the subcommands `plan`, `train`, `fit`, `lr-find`, `verify`, `sweep`,
// `report`, `sample`, `evaluate`, `predict` and `launch` (one file each, subcommand.h), their flags
// (flags.h, from config/option_table.h), and the single place where errors become one line on
// stderr and an exit code:
//   0 success, 1 internal error (a bug: please report), 2 bad input (flags, config, plan,
//   data, model or weight files, checkpoints, run directory), 3 a data-parallel job failed
//   (launcher environment, rendezvous, a peer rank that died or timed out), 4 training diverged
//   (--max-bad-updates skipped updates in a row: non-finite, or loss spikes; the newest good
//   checkpoint is kept, or one is written), 5 out of memory (the budget cannot hold a micro-batch
//   of 1, or an allocation outside the micro-steps failed), 128 + N stopped by signal N (SIGINT
//   130, SIGTERM 143) after writing a checkpoint. `launch` returns its failing worker's code.
namespace bigbatch::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInternalError = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitDistributed = 3;
inline constexpr int kExitDiverged = 4;
inline constexpr int kExitOutOfMemory = 5;
// `bigbatch verify`: accumulation differs from one batch — explained by BatchNorm (6), or not (7).
inline constexpr int kExitVerifyBatchNorm = 6;
inline constexpr int kExitVerifyUnexpected = 7;

int run(int argc, char** argv);

}  // namespace bigbatch::cli
