#pragma once
// A configuration resolved against a dataset size and a world size: the batch plan, the epoch
// arithmetic, the learning-rate schedule in updates and the run's length. `bigbatch plan`
// prints exactly this, and `bigbatch train` runs exactly this, so the two never disagree.
//
//   ResolvedRun run = resolve_run(config, /*dataset_size=*/60000, /*world_size=*/1);
//   double lr = run.schedule.lr_at(step);
#include <cstdint>
#include <memory>
#include <optional>

#include "batching/batch_plan.h"
#include "batching/token_packing.h"
#include "config/train_config.h"
#include "schedule/batch_growth.h"
#include "schedule/batch_schedule.h"
#include "schedule/lr_schedule.h"
#include "schedule/run_schedule.h"

namespace bigbatch {

struct ResolvedRun {
  BatchPlan plan;
  EpochPlan epoch;
  LrSchedule schedule;
  int64_t epochs = 0;         // epochs the run starts (the last may be partial)
  int64_t total_updates = 0;  // min(epochs x updates_per_epoch, max_updates)
  // AdamW's hyperparameters after --adam-sqrt-adjust (unset: as configured).
  std::optional<AdamHyperparameters> adam;
  // --lr-scaling adascale: `schedule` counts scale-invariant updates at the reference batch
  // (its warmup, decay and milestones too), and the run ends when they reach
  // `scale_invariant_total` = --epochs of the reference batch. `total_updates` and `epochs`
  // are then only bounds (a gain of 1 throughout).
  struct AdaScaleRun {
    int64_t reference_batch = 0;
    double scale = 1;  // global / reference
    int64_t scale_invariant_total = 0;
  };
  std::optional<AdaScaleRun> adascale;
  // --global-batch-schedule: `plan` and `epoch` are the first step's; the trainer switches plans
  // at the thresholds. `schedule` (the LR's) counts reference-batch updates, i.e. samples /
  // reference_batch, so warmup and decay run on data seen and nothing jumps at a switch; the
  // peak follows the scaling rule at each batch. `total_updates` is the simulated count.
  struct RampRun {
    GlobalBatchSchedule batches;
    std::vector<RampPhase> phases;  // as simulated over the whole run
    int64_t reference_batch = 0;
    int64_t total_samples = 0;
  };
  std::optional<RampRun> ramp;
  // --global-batch auto: `ramp` holds its first step (the start), and the trainer adds the
  // doublings this rule decides.
  std::optional<GrowthRule> auto_batch = std::nullopt;
  // Why its largest batch is below the default when the betas bound it ("the last doubling
  // before beta1 0.9 reaches 0 at 10x the rate's reference batch 32 under --adam-sqrt-adjust");
  // empty when --max-global-batch or the default set it.
  std::string auto_batch_limit_note = {};
  // --eval-every in updates (0: off): updates whose count is a multiple of it are evaluated.
  int64_t eval_every_updates = 0;
  // --eval-every in samples, epochs or tokens under a batch that changes (a ramp, the automatic
  // batch), in samples (0: off): the update in which samples_seen passes a multiple of it is
  // evaluated, so the points are the same amounts of data whatever batches the run takes.
  int64_t eval_every_samples = 0;
  // --micro-batch-tokens (0: off): each window is cut into micro-batches of at most this many
  // padded tokens, so `plan`'s micro-batch and accumulation are nominal; `token_cut` is what the
  // cut makes of the first epoch on rank 0, where the data is known (train, and plan that loads
  // it).
  int64_t micro_batch_tokens = 0;
  std::optional<TokenCutEpoch> token_cut = std::nullopt;
};

// `items_per_sample`: token rows' mean target tokens per sample (intervals in tokens); 0 for
// samples that are their own items.
ResolvedRun resolve_run(const TrainConfig& config, int64_t dataset_size, int64_t world_size,
                        double items_per_sample = 0);

// The regime that runs this resolution (schedule/run_schedule.h): a batch ramp, AdaScale or one
// fixed global batch, starting from `plan` and `epoch`.
std::unique_ptr<RunSchedule> make_run_schedule(const ResolvedRun& run);

}  // namespace bigbatch
