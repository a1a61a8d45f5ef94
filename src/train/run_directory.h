#pragma once
// The set-up's first stage: a run's directory. A new run gets a directory of its own that holds
// no run and is locked while it trains; a resumed run's metrics.jsonl is cut back to its
// checkpoint. Torch-free: files, locks and records only.
//
//   refuse_used_run_directory(config.out, LockHeld::No);   // before the data loads
//   auto lock = prepare_run_directory(run_dir);             // once the inputs are accepted
#include <functional>
#include <memory>
#include <string>

#include "config/train_config.h"
#include "core/files.h"
#include "state/training_progress.h"

namespace bigbatch {

// "20261201-154354", local time: sortable, and safe in a path.
std::string default_run_timestamp();

// runs/<prefix><local time> ("runs/20261201-154354"), with a suffix when that exists already.
std::string default_run_directory(const std::string& prefix = "");

// Whether this process holds the directory's lock already.
enum class LockHeld { No, Yes };
// A run directory holding a run is refused. Unless this process holds its lock, a run training
// there is named first (DirectoryLock says by which process), then a run that ended there. A
// run that stopped before its first checkpoint (records, no weights, no complete checkpoint:
// nothing can resume it) is let through: prepare_run_directory sets it aside.
void refuse_used_run_directory(const std::string& dir, LockHeld held);

// A run directory is never reused: a finished run's files are worth more than a typo in --out.
// Creates the directory of a new run and locks it; the check that it holds no run comes after
// the lock, so two runs started into one directory at once cannot both pass it. The records of
// a run that stopped before its first checkpoint are moved to RUN/abandoned/stopped-before-a-
// checkpoint-<time>/ first, that directory returned in `set_aside`.
std::unique_ptr<DirectoryLock> prepare_run_directory(const std::string& dir,
                                                     std::string* set_aside = nullptr);

// What a resumed run trains with (`bigbatch train --resume PATH`, bigbatch.train(resume=PATH)):
// the run's own config.toml, then `overrides` (--config and the flags; the Python keywords),
// continuing in the run's directory from its newest checkpoint (or the one PATH names).
// `init_weights_given` and `out_given` say what the caller asked for besides: weights of
// another run (refused: the checkpoint's are where the run stands) and an output directory
// (refused unless it is the run's own).
TrainConfig resume_configuration(const std::string& path,
                                 const std::function<void(TrainConfig&)>& overrides,
                                 bool init_weights_given, bool out_given);

// Cuts metrics.jsonl back to what it held when the checkpoint was written. The file may not be
// as the checkpoint left it (an older checkpoint without its length, a file edited or shortened
// since): then the lines of steps after the checkpoint's are dropped instead. Returns whether
// the cut was exact.
bool keep_metrics_of_checkpoint(const std::string& path, const TrainingProgress& progress);

}  // namespace bigbatch
