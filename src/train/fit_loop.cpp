#include "train/fit_loop.h"

#include <algorithm>
#include <cmath>
#include <csignal>

#include "core/clock.h"
#include "core/error.h"
#include "data/sampler.h"
#include "device/device.h"
#include "memory/tracking_allocator.h"
#include "runtime/runtime_env.h"
#include "stats/loss_spikes.h"
#include "train/branch_trial.h"
#include "train/memory_back_off.h"
#include "train/run_setup.h"

namespace bigbatch {

// --- FitLoop: the epochs ----------------------------------------------------------------------

FitLoop::FitLoop(TrainingRun& run, Console& console)
    : run_(run), state_(run.state), console_(console), checkpoints_(run), observers_(console) {
  // The gradient noise scale from the two batch sizes every accumulating update has. Averages
  // of the other gradient (a checkpoint from before the preconditioned form, or resumed with
  // another --noise-gradient) do not mix with this run's: they start afresh.
  NoiseScaleState noise = run.state.at.noise;
  const bool preconditioned = run.config.preconditioned_noise();
  if (noise.preconditioned != preconditioned) {
    if (noise.samples > 0) {
      console.say(std::string("noise scale: the checkpoint's averages are of the ") +
                  (noise.preconditioned ? "preconditioned" : "raw") +
                  " gradient, this run's of the " + (preconditioned ? "preconditioned" : "raw") +
                  " one: measured afresh");
    }
    noise = NoiseScaleState{};
    noise.preconditioned = preconditioned;
  }
  noise_.restore(noise);
}

void FitLoop::run() {
  // The process's resident peak from here on is training's, not the data loader's transient
  // buffers'; where it starts is recorded, so the growth is known.
  reset_peak_rss();
  // Wall-clock time from here, everything included (metrics, progress, checkpoints): what a
  // stopwatch beside the run would read, unlike train_seconds, which times the updates alone.
  train_start_ = SteadyClock::now();
  TrainingProgress& at = state_.at;
  tell(train_start_event(at, run_.device.str(), memory_counters().current_bytes,
                         current_rss_bytes()));
  if (const auto stopped = verdicts_.stopped_before_resume(run_))
    console_.say(*stopped);
  while (!state_.schedule->complete(at) && !ends_early()) {
    const auto order = epoch_order(run_.config.seed, at.epoch, run_.data.train.size(),
                                   run_.config.shuffle ? Shuffle::On : Shuffle::Off);
    bool stop = false;
    while (!epoch_used_up() && !state_.schedule->complete(at) && !stop && !ends_early())
      stop = run_update(order);
    if (epoch_used_up()) {
      record_epoch(/*ends_inside=*/false);
      // A signal during the evaluation stops here, not an update later. Ranks stop only
      // together, at an update (the signal may have reached one of them).
      if (run_.job.world_size == 1 && interrupts_.requested())
        stop = true;
      start_next_epoch();
      if (stop || checkpoints_.due())
        checkpoints_.write();
    }
    if (stop)
      stop_after_update();
    if (ends_early())
      break;
  }
  finish();
}

// Whether the epoch's order has no window left (under --last-window drop, none that the next
// update's batch fills).
bool FitLoop::epoch_used_up() const {
  const int64_t rest = run_.data.train.size() - state_.at.position_in_epoch;
  return rest == 0 || (run_.config.last_window == LastWindow::Drop &&
                       rest < state_.schedule->global_batch_at(state_.at));
}

// --- One update -------------------------------------------------------------------------------

bool FitLoop::run_update(const std::vector<int64_t>& order) {
  TrainingProgress& at = state_.at;
  if (const auto proposal = state_.schedule->proposal(at))
    return test_proposal(order, *proposal);
  const int64_t samples_before = at.samples_seen;
  const std::optional<TrainedUpdate> update = train_update(order);
  if (!update)
    return false;  // the same update again, cut smaller
  report_update(*update);
  check_divergence();
  bool stop = update->step.stats.stop_requested;
  const bool evaluated = evaluation_due(samples_before);
  if (evaluated) {
    evaluate_on_interval();
    // A signal during it stops here (a single process; ranks stop together, at an update).
    stop = stop || (run_.job.world_size == 1 && interrupts_.requested());
  }
  // What the update cost besides its micro-steps is everything else it took: finishing and
  // applying the gradients, assembling the window, its records and display (an update that
  // evaluated is not timed). Told before a checkpoint, so that the checkpoint holds what the
  // regime measured and decided.
  const UpdateTiming timing{update->rank_samples, update->step.gradient_seconds,
                            seconds_since(update->start) - update->step.gradient_seconds,
                            update->whole_window && !evaluated};
  UpdateObservation seen{timing, &noise_, nullptr};
  if (run_.job.world_size > 1) {
    seen.first_rank_value = [this](double value) {
      std::vector<torch::Tensor> shared = {torch::tensor({value}, torch::kFloat64)};
      run_.reducer->broadcast_from_first_rank(shared);
      return shared[0].item<double>();
    };
  }
  if (const auto check = state_.schedule->observe(at, seen))
    tell(batch_check_event(*check));
  return after_update(stop);
}

// A checkpoint at an epoch's end waits for the epoch's evaluation, so that a resumed run does
// not evaluate that epoch twice.
bool FitLoop::after_update(bool stop) {
  if (!epoch_used_up() && (stop || checkpoints_.due()))
    checkpoints_.write();
  return stop;
}

std::optional<FitLoop::TrainedUpdate> FitLoop::train_update(const std::vector<int64_t>& order) {
  TrainingProgress& at = state_.at;
  if (const auto change = state_.schedule->plan_update(at))
    announce_batch_change(*change);
  TrainedUpdate update;
  update.start = SteadyClock::now();
  const int64_t calls_before = run_.reducer->calls();
  const UpdateWindow window =
      window_at(state_.schedule->plan(), run_.data.train.size(), run_.config.last_window,
                at.position_in_epoch, run_.job.rank);
  update.rank_samples = window.rank_size;
  update.whole_window = at.micro_step == 0;
  const StepRequest request = step_request(order, window);
  reset_peak_memory();
  try {
    if (!assembler_) {
      assembler_ = std::make_unique<BatchAssembler>(run_.data.train,
                                                    state_.schedule->plan().micro_batch_size,
                                                    /*background=*/run_.config.prefetch,
                                                    /*pinned=*/run_.device.is_cuda());
    }
    update.step = train_step(*run_.engine, *assembler_, request);
  } catch (const c10::OutOfMemoryError& oom) {
    back_off(oom);
    return std::nullopt;
  }
  if (!update.step.completed) {
    if (in_branch_) {  // inside a branch test, which goes back to its start
      branch_stopped_ = true;
      return std::nullopt;
    }
    console_.say(stopped_by_signal_line(interrupts_.signal_number(), at, StopPoint::InsideUpdate,
                                        run_.run_dir, relaunch_command()));
    throw Interrupted(interrupts_.signal_number(),
                      "training interrupted inside update " + std::to_string(at.step + 1));
  }
  update.peak_bytes = memory_counters().peak_bytes;
  epoch_peak_bytes_ = std::max(epoch_peak_bytes_, update.peak_bytes);
  update.seconds = seconds_since(update.start);
  count_update(window, update.step, update.seconds);
  update.allreduce_calls = run_.reducer->calls() - calls_before;
  if (in_branch_ && update.step.stats.stop_requested)
    branch_stopped_ = true;
  return update;
}

void FitLoop::report_update(const TrainedUpdate& update) {
  const TrainingProgress& at = state_.at;
  observers_.update(run_, UpdateReport{update.step, at, update.seconds, seconds_since(train_start_),
                                       update.allreduce_calls, update.peak_bytes,
                                       at.skipped_updates, noise_.noise_scale()});
}

bool FitLoop::test_proposal(const std::vector<int64_t>& order, const BatchDecision& proposal) {
  const int64_t samples_before = state_.at.samples_seen;
  tell(branch_test_start_event(proposal));
  // Each branch's records (current, doubled, control), told for the kept one.
  FitObservers::Held held[3];
  const TrainBranch train_branch = [&](TestBranch branch) {
    observers_.hold();
    in_branch_ = true;
    branch_stopped_ = false;
    while (state_.at.samples_seen < samples_before + proposal.test_samples && !branch_stopped_) {
      if (const std::optional<TrainedUpdate> update = train_update(order))
        report_update(*update);
    }
    in_branch_ = false;
    held[static_cast<int>(branch)] = observers_.release();
    return !branch_stopped_;
  };
  const std::optional<BatchTest> test = run_branch_test(run_, noise_, proposal, train_branch);
  if (!test) {
    // Back where the test began, the proposal still waiting: a resume tests it again.
    branch_stopped_ = false;
    checkpoints_.write();
    stop_after_update();
  }
  // The kept branch's records, as a run without the test would have written them.
  observers_.tell(run_,
                  held[static_cast<int>(test->kept ? TestBranch::Doubled : TestBranch::Current)]);
  tell(branch_test_event(*test, state_.at.step));
  check_divergence();
  // An evaluation the branch passed comes at its end. A signal while the slice was scored
  // stops here (a single process; ranks stopped inside a branch together).
  if (evaluation_due(samples_before))
    evaluate_on_interval();
  return after_update(run_.job.world_size == 1 && interrupts_.requested());
}

// The micro-steps of this update, from where a mid-window checkpoint left off. A single
// process may stop or checkpoint between them; ranks of a job do so only at update boundaries,
// where they meet.
StepRequest FitLoop::step_request(const std::vector<int64_t>& order, const UpdateWindow& window) {
  StepRequest request(order, window);
  request.first_micro_step = state_.at.micro_step;
  request.window_bn = run_.window_bn.get();
  request.noise = &noise_;
  request.schedule = state_.schedule.get();
  request.at = &state_.at;
  request.stop_requested = [this] { return interrupts_.requested(); };
  request.micro_batch_tokens = state_.schedule->micro_batch_tokens();
  request.recent_losses = &state_.at.recent_losses;
  request.spike_factor = run_.config.spike_factor;
  if (run_.device.is_cuda())
    request.synchronize = [device = run_.device] { synchronize_device(device); };
  request.after_micro_step = [this](int64_t done, int64_t micro_steps) {
    state_.at.micro_step = done;
    if (in_branch_)  // a branch test checkpoints before and after, never inside
      return run_.job.world_size > 1 || done == micro_steps || !interrupts_.requested();
    checkpoints_.note_micro_step();
    if (run_.job.world_size > 1 || done == micro_steps)
      return true;
    if (interrupts_.requested()) {
      checkpoints_.write_inside_window();
      return false;  // the window stays open, in the checkpoint
    }
    if (checkpoints_.due_inside_window())
      checkpoints_.write_inside_window();
    return true;
  };
  return request;
}

void FitLoop::count_update(const UpdateWindow& window, const StepResult& step, double seconds) {
  TrainingProgress& at = state_.at;
  const UpdateStats& stats = step.stats;
  state_.schedule->count(at, step.rate, /*applied=*/!stats.skipped());
  at.noise = noise_.state();
  at.micro_step = 0;
  at.train_seconds += seconds;
  ++at.step;
  ++at.update_in_epoch;
  at.position_in_epoch += window.size;
  at.global_batch = state_.schedule->plan().global_batch_size;
  // A skipped update consumed its samples but taught nothing: the epoch's training loss and
  // accuracy are those of the updates that were applied.
  at.samples_seen += stats.counts.samples;
  at.items_seen += stats.counts.items;
  if (!stats.skipped()) {
    at.epoch_counts += stats.counts;
    at.bad_in_a_row = 0;
    remember_applied_loss(at.recent_losses, stats.loss());
    return;
  }
  ++at.skipped_updates;
  ++at.bad_in_a_row;
  tell(skipped_update_event(at, stats.loss(), stats.loss_spike));
}

void FitLoop::check_divergence() {
  const TrainingProgress& at = state_.at;
  if (at.bad_in_a_row < run_.config.max_bad_updates)
    return;
  const int64_t first_bad = at.step - at.bad_in_a_row + 1;
  // An update's loss is that of the weights the update before it left, so the weights of
  // step first_bad - 1 are the first whose loss spiked; a checkpoint of step first_bad - 2 or
  // earlier, written outside a streak, is from before the trouble. Checkpoints on the cadence
  // wait while updates are skipped (Checkpointer::due), so the newest is such a one or none:
  // it is kept, to resume from. Otherwise the weights as they stand (no skipped update touched
  // them) are written.
  const int64_t clean = checkpoints_.last_clean_step();
  Divergence divergence;
  divergence.step = at.step;
  divergence.samples_seen = at.samples_seen;
  divergence.bad_in_a_row = at.bad_in_a_row;
  divergence.kept = clean >= 0 && clean + 1 < first_bad;
  divergence.had_checkpoint = clean >= 0;
  divergence.resume_step = divergence.kept ? clean : at.step;
  divergence.spike_factor = run_.config.spike_factor;
  divergence.clipping = run_.config.clip_norm > 0;
  divergence.run_dir = run_.run_dir;
  divergence.schedule = &state_.schedule->lr_schedule();
  if (!divergence.kept) {
    // Resuming it is a decision to go on from these weights (with a lower rate): the guard
    // then judges the resumed run by its own losses, not by the streak that stopped this one.
    state_.at.bad_in_a_row = 0;
    state_.at.recent_losses.clear();
    checkpoints_.write();
  }
  tell(diverged_event(divergence));
  throw divergence_error(divergence);
}

// Out of memory inside a window: the window was thrown away (train_step), and the same update
// comes again, cut smaller (train/memory_back_off.h).
void FitLoop::back_off(const c10::OutOfMemoryError& oom) {
  state_.at.micro_step = 0;
  // What the failed window held is free again; a GPU's allocator gives its cache back too, so
  // the smaller micro-batch starts from what is really in use.
  release_cached_memory();
  const MemoryBackOff backed_off =
      back_off_after_out_of_memory(run_, short_out_of_memory_message(oom.what_without_backtrace()));
  if (backed_off.micro_batch_changed)
    assembler_.reset();  // the next window allocates the smaller buffer
  tell(backed_off.event);
}

// A ramp's switch of global batch, made by the schedule at this update boundary: BatchNorm's
// momentum follows the new accumulation steps.
void FitLoop::announce_batch_change(const BatchChange& change) {
  const TrainingProgress& at = state_.at;
  prepare_for_training(run_.model, run_.config, change.plan.accumulation_steps);
  RunEvent event = batch_change_event(change, at.step + 1, at.samples_seen);
  // Keyed by the first update at the new batch. A run resumed from a checkpoint taken before it
  // drops the line and writes it again; one resumed from inside that update's window kept it
  // (it was written before the checkpoint) and announces it on stderr only.
  if (at.step + 1 == state_.update_already_logged)
    event.record = nullptr;
  tell(event);
}

// --- Epoch ends -------------------------------------------------------------------------------

// The record of an epoch — or of the part of one where the run ends inside it (--max-updates,
// AdaScale's scale-invariant length) — with its evaluation and the --target-accuracy check.
// Only rank 0 evaluates.
void FitLoop::record_epoch(bool ends_inside) {
  TrainingProgress& at = state_.at;
  at.recorded_epoch_step = at.step;
  if (!run_.job.is_main())
    return;
  const Task task = run_.task();
  EpochFacts facts;
  facts.peak_bytes = epoch_peak_bytes_;
  facts.rss_peak_bytes = peak_rss_bytes();
  facts.micro_batch = state_.schedule->plan().micro_batch_size;
  facts.scores_predictions = task.scores_predictions();
  facts.regression_outputs = task.is_regression() ? run_.data.train.outputs() : 0;
  if (ends_inside)
    facts.partial_epoch = state_.schedule->epoch_progress(at);
  nlohmann::json record = epoch_record(at, noise_, facts);
  evaluate_into(record, /*interval=*/false);
}

// An epoch's or an interval's record completed: tokens seen and the held-out figures, told to
// the observers, checked against the target.
void FitLoop::evaluate_into(nlohmann::json& record, bool interval) {
  if (run_.data.train.is_tokens())
    record["tokens_seen"] = state_.at.items_seen;
  record.update(evaluate_splits());
  if (interval) {
    observers_.evaluation(run_, EpochReport{record});
  } else {
    observers_.epoch(run_, EpochReport{record});
  }
  for (const RunEvent& event : verdicts_.judge(run_, record))
    tell(event);
}

nlohmann::json FitLoop::evaluate_splits() {
  const int64_t rows = evaluation_rows_in_training(
      run_.data.train, state_.schedule->plan().micro_batch_size,
      state_.schedule->micro_batch_tokens(), run_.config.memory_budget > 0);
  return held_out_.figures(state_.at.step, run_.model, run_.data, rows, run_.precision);
}

// Every eval_every_updates-th update, counted from the run's start (a resumed run keeps the
// positions), or the update that passes a multiple of eval_every_samples (a batch that
// changes), except where an epoch's end or the run's evaluates anyway. `samples_before`: the
// samples seen before the update just counted.
bool FitLoop::evaluation_due(int64_t samples_before) const {
  const TrainingProgress& at = state_.at;
  const int64_t every = run_.resolved.eval_every_updates;
  const int64_t every_samples = run_.resolved.eval_every_samples;
  const bool due =
      (every > 0 && at.step % every == 0) ||
      (every_samples > 0 && at.samples_seen / every_samples > samples_before / every_samples);
  // The run's end records (and evaluates) the epoch where it stops: not twice.
  return due && !epoch_used_up() && !state_.schedule->complete(at);
}

void FitLoop::evaluate_on_interval() {
  if (run_.job.is_main()) {
    const TrainingProgress& at = state_.at;
    nlohmann::json record = evaluation_record(
        at, double(at.epoch) + state_.schedule->epoch_progress(at), seconds_since(train_start_));
    evaluate_into(record, /*interval=*/true);
  }
  verdicts_.share(run_);
}

void FitLoop::start_next_epoch() {
  verdicts_.share(run_);
  TrainingProgress& at = state_.at;
  at.epoch += 1;
  epoch_peak_bytes_ = 0;
  at.update_in_epoch = 0;
  at.position_in_epoch = 0;
  at.epoch_counts = Counts{};
}

std::string FitLoop::relaunch_command() const {
  return run_.job.env ? run_.job.env->relaunch : std::string();
}

void FitLoop::stop_after_update() const {
  const int signal_number = interrupts_.requested() ? interrupts_.signal_number() : SIGTERM;
  console_.say(stopped_by_signal_line(signal_number, state_.at, StopPoint::AfterUpdate,
                                      run_.run_dir, relaunch_command()));
  throw Interrupted(signal_number,
                    "training interrupted at update " + std::to_string(state_.at.step));
}

// --- The end of the run -----------------------------------------------------------------------

void FitLoop::finish() {
  const TrainingProgress& at = state_.at;
  // A run that ends inside an epoch (its length, or a target reached at an interval's
  // evaluation) is recorded where it ends, once: a resumed run with nothing left to train finds
  // that record already written.
  if (at.update_in_epoch > 0 && at.recorded_epoch_step != at.step)
    record_epoch(/*ends_inside=*/true);
  if (const std::string summary = state_.schedule->summary(at); !summary.empty())
    console_.say(summary);
  // The end of a run always leaves a checkpoint (with --checkpoint-every or a resume), so the
  // run can be extended later with more --epochs.
  // A signal during the last evaluation: the run stops as asked (130/143), from a checkpoint
  // that a resume finishes from, instead of exiting 0 as if nothing was asked.
  if (interrupts_.requested()) {
    if (checkpoints_.last_step() != at.step)
      checkpoints_.write();
    stop_after_update();
  }
  if ((checkpoints_.has_cadence() || run_.resuming) && checkpoints_.last_step() != at.step)
    checkpoints_.write();
  if (const auto best = run_.config.keep_best_metric()) {
    console_.say(best_weights_line(at.keep_best, best->metric_in(run_.data.validation.size() > 0),
                                   run_.run_dir + "/best.safetensors"));
  }
  if (!run_.config.noise_scale)
    return;  // --no-noise-scale (and lr-find): nothing measured, nothing to judge
  std::string verdict = batch_size_verdict(noise_, state_.schedule->plan().global_batch_size,
                                           state_.schedule->epoch().items_per_sample);
  // The verdict counts updates and samples, not what an update costs; the automatic batch
  // weighed both, and its line above may keep a batch this one calls small: one reading.
  if (!verdict.empty() && run_.resolved.auto_batch && noise_.summary()) {
    verdict +=
        "; that counts updates, not their cost: the automatic batch above weighed an "
        "update's cost against its samples to decide";
  }
  if (!verdict.empty())
    console_.say(verdict);
}

}  // namespace bigbatch
