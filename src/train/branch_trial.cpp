#include "train/branch_trial.h"

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
  TrainingProgress& at = run.state.at;
  const auto test_start = SteadyClock::now();
  const TrainingSnapshot start = TrainingSnapshot::take(*run.model, *run.optimizer, at);

  BranchLosses losses;
  const SampleLossList at_start = controller_losses(run);
  double start_sum = 0;
  for (const double loss : at_start.per_sample)
    start_sum += loss;
  losses.start_loss = start_sum / double(at_start.items);

  // Trains `branch` from where the run stands; its seconds, or none when a stop was asked for
  // (everything put back to the start).
  const auto train = [&](TestBranch branch) -> std::optional<double> {
    const auto branch_start = SteadyClock::now();
    if (!train_branch(branch)) {
      put_back(run, noise, start);
      return std::nullopt;
    }
    return seconds_since(branch_start);
  };

  // What the doubled branch is compared with: the current batch as the run goes on, or, under
  // --growth-control temperature, at the doubled batch's noise temperature (a control at the
  // current rate, as under the linear rule, is the current branch itself).
  TestBranch compared = TestBranch::Current;
  double control_rate = 1;
  if (run.config.growth_control == GrowthControl::Temperature) {
    control_rate = schedule.enter_branch(at, TestBranch::Control);
    if (control_rate != 1)
      compared = TestBranch::Control;
  } else {
    schedule.enter_branch(at, TestBranch::Current);
  }
  std::optional<double> current_seconds = train(compared);
  if (!current_seconds)
    return std::nullopt;
  SampleLossList scored = controller_losses(run);
  losses.current = std::move(scored.per_sample);
  losses.items = scored.items;
  std::optional<TrainingSnapshot> current;
  if (compared == TestBranch::Current)
    current = TrainingSnapshot::take(*run.model, *run.optimizer, at);

  put_back(run, noise, start);
  schedule.enter_branch(at, TestBranch::Doubled);
  const std::optional<double> doubled_seconds = train(TestBranch::Doubled);
  if (!doubled_seconds)
    return std::nullopt;
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
  test.control_rate_factor = control_rate;
  test.kept = verdict.keep;
  if (!test.kept && current) {
    put_back(run, noise, *current);
  } else if (!test.kept) {
    // The control is not what the run trains: the current batch again, at its own rate.
    put_back(run, noise, start);
    schedule.enter_branch(at, TestBranch::Current);
    current_seconds = train(TestBranch::Current);
    if (!current_seconds)
      return std::nullopt;
    test.branches = 3;
  }
  test.extra_seconds =
      seconds_since(test_start) - (test.kept ? *doubled_seconds : *current_seconds);
  at.train_seconds += test.extra_seconds;
  schedule.settle(at, test);
  prepare_for_training(run.model, run.config, schedule.plan().accumulation_steps);
  return test;
}

}  // namespace bigbatch
