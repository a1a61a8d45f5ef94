#pragma once
// Out of memory inside a window (a budget lowered on resume, fragmentation, a larger sample):
// the window was thrown away (train/train_step.h), and the same samples are replayed cut
// smaller — the micro-batch halved and accumulation raised, or under --micro-batch-tokens the
// token budget halved. The global batch, the samples and the mathematics stay the same (except
// BatchNorm's statistics, which follow the micro-batch). Where it cannot back off (micro-batch
// 1, one row of --seq-len, --strict-batch with BatchNorm, ranks of a job) it is an Error of
// kind Memory naming the fix.
//
//   const MemoryBackOff backed_off = back_off_after_out_of_memory(run, what);
//   if (backed_off.micro_batch_changed) ...rebuild the batch buffer...
//   tell(backed_off.event);
#include <string>

#include "report/run_events.h"
#include "train/training_run.h"

namespace bigbatch {

struct MemoryBackOff {
  RunEvent event;
  // The micro-batch's sample count changed (not only the token budget).
  bool micro_batch_changed = false;
};

// Backs run.state.schedule off after `what` (the short out-of-memory message), counts it into
// run.state.at, and re-prepares the model for the new accumulation.
MemoryBackOff back_off_after_out_of_memory(TrainingRun& run, const std::string& what);

}  // namespace bigbatch
