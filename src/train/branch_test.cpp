#include "train/branch_test.h"

#include "checkpoint/checkpoint.h"
#include "core/clock.h"
#include "core/error.h"
#include "train/evaluate.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// The model, optimizer, generators and progress of `snapshot`, the noise averages and the plan
// that go with them (BatchNorm's momentum follows the plan's accumulation).
void put_back(TrainingRun& run, NoiseScaleTracker& noise, const TrainingSnapshot& snapshot) {
  run.engine->discard();  // a window a stop left open
  snapshot.restore(*run.model, *run.optimizer, run.state.at);
  noise.restore(run.state.at.noise);
  run.state.schedule->restore(run.state.at);
  prepare_for_training(run.model, run.config, run.state.schedule->plan().accumulation_steps);
}

SampleLossList controller_losses(TrainingRun& run) {
  const int64_t rows = evaluation_rows_in_training(
      run.data.train, run.state.schedule->plan().micro_batch_size,
      run.state.schedule->micro_batch_tokens(), run.config.memory_budget > 0);
  return sample_losses(run.model, run.data.controller, rows, run.precision);
}

}  // namespace

std::optional<BatchTest> run_branch_test(TrainingRun& run, NoiseScaleTracker& noise,
                                         const BatchDecision& proposal,
                                         const TrainBranch& train_branch) {
  BB_INTERNAL_ASSERT(run.data.controller.size() > 0, "a branch test needs the controller's slice");
  RunSchedule& schedule = *run.state.schedule;
  const auto test_start = SteadyClock::now();
  const TrainingSnapshot start = TrainingSnapshot::take(*run.model, *run.optimizer, run.state.at);

  BranchLosses losses;
  const SampleLossList at_start = controller_losses(run);
  double start_sum = 0;
  for (const double loss : at_start.per_sample)
    start_sum += loss;
  losses.start_loss = start_sum / double(at_start.items);

  schedule.enter_branch(run.state.at, /*doubled=*/false);
  const auto current_start = SteadyClock::now();
  if (!train_branch(false)) {
    put_back(run, noise, start);
    return std::nullopt;
  }
  const double current_seconds = seconds_since(current_start);
  SampleLossList scored = controller_losses(run);
  losses.current = std::move(scored.per_sample);
  losses.items = scored.items;
  const TrainingSnapshot current = TrainingSnapshot::take(*run.model, *run.optimizer, run.state.at);

  put_back(run, noise, start);
  schedule.enter_branch(run.state.at, /*doubled=*/true);
  const auto doubled_start = SteadyClock::now();
  if (!train_branch(true)) {
    put_back(run, noise, start);
    return std::nullopt;
  }
  const double doubled_seconds = seconds_since(doubled_start);
  losses.doubled = controller_losses(run).per_sample;

  const BranchVerdict verdict =
      judge_branches(losses, run.config.growth_tolerance, run.config.growth_confidence);
  BatchTest test;
  test.proposal = proposal;
  test.start_loss = verdict.start_loss;
  test.current_loss = verdict.current_loss;
  test.doubled_loss = verdict.doubled_loss;
  test.difference = verdict.difference;
  test.standard_error = verdict.standard_error;
  test.bound = verdict.bound;
  test.confidence = run.config.growth_confidence;
  test.kept = verdict.keep;
  if (!test.kept)
    put_back(run, noise, current);
  test.extra_seconds = seconds_since(test_start) - (test.kept ? doubled_seconds : current_seconds);
  run.state.at.train_seconds += test.extra_seconds;
  schedule.settle(run.state.at, test);
  prepare_for_training(run.model, run.config, schedule.plan().accumulation_steps);
  return test;
}

}  // namespace bigbatch
