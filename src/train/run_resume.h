#pragma once
// The set-up's resume stage (train/training_run.h): a checkpoint read into the run and checked
// against it, newer checkpoints of an abandoned history set aside, the schedule re-planned when
// the run's length changed, the watched metrics and the best weights made consistent with the
// checkpoint. Every rank reads the checkpoint (a shared file system across machines is
// assumed); only rank 0 rewrites the run's files.
//
//   abandon_newer_history(run, console, /*move=*/false);   // refused before anything is read
//   resume_from_checkpoint(run, partial, console);
//   if (!run.finished) { restart_watches_of_other_metrics(run, console); ... }
#include "checkpoint/checkpoint.h"
#include "console/console.h"
#include "train/training_run.h"

namespace bigbatch {

// A resume from an older checkpoint starts a new history. The run's newer checkpoints belong
// to the one it abandons: left in place, pruning would delete the new history's checkpoints
// and keep theirs, and the next resume would continue the abandoned one (issue 21).
// `move` false: only the refusal, before anything is read; true: the move, once the chosen
// checkpoint has been accepted (a refused one must leave the newer history where it was).
void abandon_newer_history(TrainingRun& r, Console& console, bool move);

// Reads --resume's checkpoint into the model, optimizer and run state. `partial`: the window
// a checkpoint taken inside one holds, for the engine to go on with. A run that had already
// finished is marked `finished` and left as it is.
void resume_from_checkpoint(TrainingRun& r, PartialWindow& partial, Console& console);

// --early-stop and --keep-best watching another metric than the checkpoint counted (the flags
// override config.toml on a resume): the count starts again, on every rank alike.
void restart_watches_of_other_metrics(TrainingRun& r, Console& console);

// --keep-best on a resume: RUN/best.safetensors must be the best the checkpoint knew of. After a
// kill or from an older checkpoint it may be a later one (of updates this resume trains again,
// or of a history it abandons): the checkpoint's own copy replaces it. Without one (a
// checkpoint from before --keep-best) the file goes and the best is looked for again.
void restore_best_weights(TrainingRun& r, Console& console);

}  // namespace bigbatch
