#pragma once
// --growth-test branch: a proposed doubling of the global batch (schedule/batch_growth.h)
// confirmed by experiment. From the point the run stands at, the next `test_samples` samples
// are trained at the current batch, the weights scored on the controller's slice (training
// samples set aside, data.controller), and the run put back exactly (checkpoint/checkpoint.h's
// TrainingSnapshot); the same samples are then trained at the doubled batch with its rate and
// scored on the same slice. judge_branches keeps the doubled branch when its loss keeps up;
// otherwise the current branch's state is put back. Both branches consume the same samples, so
// the data stream is the same whatever is decided, and the kept branch is exactly what a run
// without the test would have trained: a run's decision log replays bit for bit as a
// --global-batch-schedule. What the test took besides the kept branch's training (the losing
// branch, the snapshots, the scoring) is added to the run's train_seconds.
//
// Under --growth-control temperature the first branch is a control instead: the current batch
// at the doubled batch's noise temperature (schedule/batch_growth.h's GrowthControl). When the
// doubled branch is rejected the control is not what the run goes on with, so the current
// batch is trained a third time from the start, at its own rate.
//
// Every rank runs the branches and scores the slice itself: their weights are identical, so
// are their verdicts, with no collective.
//
//   const auto train_branch = [&](TestBranch branch) { ...updates until the samples are done... };
//   std::optional<BatchTest> test = run_branch_test(run, noise, *proposal, train_branch);
//   if (!test) ...  // a stop inside a branch: back at the start, the proposal still pending
#include <functional>
#include <optional>

#include "schedule/batch_growth.h"
#include "state/batch_growth_state.h"
#include "stats/gradient_noise.h"
#include "train/training_run.h"

namespace bigbatch {

// Trains one branch's samples at the plan in force; false when a stop was asked for inside it.
// The branch kept is the one whose records the run keeps.
using TrainBranch = std::function<bool(TestBranch branch)>;

// The test of `proposal` from run.state.at (which holds it). Returns the test with run.state.at,
// the model, the optimizer, the generators and `noise` those of the kept branch, and the schedule
// on its plan; or nullopt when a branch was stopped, with everything as it was at the start.
std::optional<BatchTest> run_branch_test(TrainingRun& run, NoiseScaleTracker& noise,
                                         const BatchDecision& proposal,
                                         const TrainBranch& train_branch);

}  // namespace bigbatch
