#include "train/memory_back_off.h"

#include <algorithm>

#include "core/error.h"
#include "models/models.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// Under --micro-batch-tokens the window is cut by padded tokens, so the budget is what halves:
// the same samples replayed in smaller micro-batches (the plan, the whole window, stays).
RunEvent back_off_tokens(TrainingRun& run, const std::string& what) {
  const int64_t from = run.state.schedule->micro_batch_tokens();
  // Below one row of --seq-len the budget stops grouping rows of full length, which is what
  // runs out: the floor is that row.
  const int64_t row = run.data.train.width();
  if (from <= row) {
    throw Error(ErrorKind::Memory,
                "out of memory at --micro-batch-tokens " + std::to_string(from) +
                    ", one row of --seq-len " + std::to_string(row) + " per micro-batch (" + what +
                    ")",
                "raise --memory-budget, lower --seq-len, or train a smaller model");
  }
  const int64_t budget = std::max(row, from / 2);
  run.state.schedule->set_micro_batch_tokens(budget);
  ++run.state.at.oom_backoffs;
  return token_back_off_event(run.state.at, what, run.state.schedule->plan().global_batch_size,
                              from, budget);
}

}  // namespace

MemoryBackOff back_off_after_out_of_memory(TrainingRun& run, const std::string& what) {
  RunSchedule& schedule = *run.state.schedule;
  const int64_t from = schedule.plan().micro_batch_size;
  if (run.job.world_size > 1) {
    // Said in the unit the run cuts its micro-batches by.
    const int64_t tokens = schedule.micro_batch_tokens();
    const std::string flag = tokens > 0 ? "--micro-batch-tokens" : "--micro-batch";
    throw Error(ErrorKind::Memory,
                "rank " + std::to_string(run.job.rank) + " ran out of memory at " +
                    (tokens > 0 ? flag + " " + std::to_string(tokens)
                                : "micro-batch " + std::to_string(from)) +
                    " (" + what + ")",
                "lower " + flag + " or raise --memory-budget (ranks do not back off together yet)");
  }
  if (schedule.micro_batch_tokens() > 0)
    return {back_off_tokens(run, what), /*micro_batch_changed=*/false};
  if (from == 1) {
    throw Error(ErrorKind::Memory,
                "out of memory at micro-batch 1, the smallest there is (" + what + ")",
                "raise --memory-budget, or train a smaller model");
  }
  const int64_t to = from / 2;
  const bool batch_norm = uses_batch_statistics(*run.model);
  if (batch_norm && run.config.strict_batch) {
    throw Error(ErrorKind::Memory,
                "--strict-batch: out of memory at micro-batch " + std::to_string(from) +
                    ", and backing off would change " + run.config.model +
                    "'s normalisation batch to " + std::to_string(to),
                "raise --memory-budget, or start with --micro-batch " + std::to_string(to));
  }
  schedule.set_micro_batch(to);
  const BatchPlan& plan = schedule.plan();
  prepare_for_training(run.model, run.config, plan.accumulation_steps);  // BatchNorm momentum
  ++run.state.at.oom_backoffs;
  return {micro_batch_back_off_event(run.state.at, what, from, plan,
                                     batch_norm ? run.config.model : ""),
          /*micro_batch_changed=*/true};
}

}  // namespace bigbatch
