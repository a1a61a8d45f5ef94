#include "train/fit_loop.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>

#include "core/error.h"
#include "core/text.h"
#include "data/sampler.h"
#include "memory/tracking_allocator.h"
#include "models/models.h"
#include "models/scripted_model.h"
#include "report/plan_report.h"
#include "runtime/runtime_env.h"
#include "schedule/adascale.h"
#include "stats/loss_spikes.h"
#include "train/device.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

nlohmann::json eval_record(const std::string& prefix, const EvalResult& r, bool tokens) {
  nlohmann::json record = {{prefix + "_loss", r.loss}};
  if (r.has_accuracy)  // a module with its own loss has no predictions to score
    record[prefix + "_accuracy"] = r.accuracy;
  if (r.is_regression)
    record[prefix + "_rmse"] = r.rmse;
  if (tokens) {
    record[prefix + "_perplexity"] = std::exp(r.loss);
    if (r.has_bits_per_byte)  // text whose bytes are known (not token files)
      record[prefix + "_bpb"] = r.bits_per_byte;
  }
  return record;
}

}  // namespace

// --- Checkpointer -------------------------------------------------------------------------

Checkpointer::Checkpointer(TrainingRun& run)
    : run_(run),
      cadence_(run.config.checkpoint_every.empty() ? Cadence{}
                                                   : Cadence::parse(run.config.checkpoint_every)),
      last_step_(run.at.step),
      last_time_(Clock::now()),
      last_clean_step_(run.resuming && run.at.bad_in_a_row == 0 ? run.at.step : -1) {
  if (cadence_.amount) {
    cadence_updates_ =
        std::max<int64_t>(1, cadence_.amount->to_updates(run.resolved.plan, run.resolved.epoch));
  }
}

// While updates are being skipped, checkpoints wait for the next applied one: should the run
// diverge, its newest checkpoint is then one from before the trouble.
bool Checkpointer::due() const {
  if (run_.at.bad_in_a_row > 0)
    return false;
  if (cadence_updates_ > 0 && run_.at.step - last_step_ >= cadence_updates_)
    return true;
  return cadence_.seconds > 0 && seconds_since(last_time_) >= cadence_.seconds;
}

bool Checkpointer::due_inside_window() const {
  return run_.at.bad_in_a_row == 0 && cadence_.micro_steps > 0 &&
         micro_steps_since_ >= cadence_.micro_steps;
}

// A checkpoint's metrics lines reach the file before it does: a run killed after it resumes
// with every line up to it.
void Checkpointer::flush_metrics() {
  if (run_.metrics) {
    run_.metrics->flush();
    run_.at.metrics_bytes = run_.metrics->flushed_bytes();
  }
}

void Checkpointer::write() {
  flush_metrics();
  if (run_.job.is_main()) {
    write_checkpoint(run_.run_dir, run_.at, run_.identity, *run_.model, *run_.optimizer,
                     run_.config.keep_checkpoints, plan_json(run_.resolved));
  }
  last_step_ = run_.at.step;
  last_time_ = Clock::now();
  micro_steps_since_ = 0;
  note_written();
}

void Checkpointer::note_written() {
  last_clean_step_ = run_.at.bad_in_a_row == 0 ? run_.at.step : -1;
}

// Only a single process checkpoints inside a window (ranks meet at update boundaries only).
void Checkpointer::write_inside_window() {
  flush_metrics();
  PartialWindow window{run_.resolved.plan.micro_batch_size,
                       run_.job.world_size,
                       run_.config.micro_batch_tokens,
                       run_.engine->window_state(),
                       {}};
  for (const auto& p : run_.model->parameters())
    window.gradients.push_back(p.grad());
  if (run_.window_bn)
    run_.window_bn->suspend();  // the checkpoint holds the running statistics, not the window's
  write_checkpoint(run_.run_dir, run_.at, run_.identity, *run_.model, *run_.optimizer,
                   run_.config.keep_checkpoints, plan_json(run_.resolved), &window);
  if (run_.window_bn)
    run_.window_bn->resume();
  micro_steps_since_ = 0;
  note_written();
}

// --- FitLoop: the epochs ----------------------------------------------------------------------

FitLoop::FitLoop(TrainingRun& run, Console& console)
    : run_(run), console_(console), checkpoints_(run) {
  observers_.push_back(std::make_unique<MetricsLog>());
  observers_.push_back(std::make_unique<ProgressDisplay>(console));
  // The gradient noise scale from the two batch sizes every accumulating update has.
  noise_.restore(run.at.noise);
}

void FitLoop::run() {
  // The process's resident peak from here on is training's, not the data loader's transient
  // buffers'; where it starts is recorded, so the growth is known.
  reset_peak_rss();
  // Wall-clock time from here, everything included (metrics, progress, checkpoints): what a
  // stopwatch beside the run would read, unlike train_seconds, which times the updates alone.
  train_start_ = Clock::now();
  TrainingProgress& at = run_.at;
  if (run_.metrics) {
    run_.metrics->write({{"event", "train_start"},
                         {"step", at.step},
                         {"device", run_.device.str()},
                         {"tensor_bytes", memory_counters().current_bytes},
                         {"rss_bytes", current_rss_bytes()}});
  }
  while (at.epoch < run_.resolved.epochs && !run_complete()) {
    const auto order = epoch_order(run_.config.seed, at.epoch, run_.data.train.size(),
                                   run_.config.shuffle ? Shuffle::On : Shuffle::Off);
    bool stop = false;
    while (!epoch_used_up() && !run_complete() && !stop && !target_reached_)
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
    if (target_reached_)
      break;
  }
  finish();
}

// The run's length: --epochs and --max-updates, or AdaScale's scale-invariant updates.
bool FitLoop::run_complete() const {
  const TrainingProgress& at = run_.at;
  const ResolvedRun& resolved = run_.resolved;
  if (resolved.adascale) {
    return at.scale_invariant_step >= double(resolved.adascale->scale_invariant_total) - 1e-9 ||
           at.step >= resolved.total_updates;
  }
  return at.step >= resolved.total_updates;
}

// The global batch of the next update: the plan's, or the ramp's at the current position.
int64_t FitLoop::next_global_batch() const {
  const TrainingProgress& at = run_.at;
  return run_.resolved.ramp
             ? run_.resolved.ramp->batches.global_batch_at(
                   {at.samples_seen, at.epoch, at.position_in_epoch}, run_.data.train.size())
             : run_.resolved.plan.global_batch_size;
}

// Whether the epoch's order has no window left (under --last-window drop, none that the next
// update's batch fills).
bool FitLoop::epoch_used_up() const {
  const int64_t rest = run_.data.train.size() - run_.at.position_in_epoch;
  return rest == 0 || (run_.config.last_window == LastWindow::Drop && rest < next_global_batch());
}

// --- One update -------------------------------------------------------------------------------

bool FitLoop::run_update(const std::vector<int64_t>& order) {
  TrainingProgress& at = run_.at;
  if (run_.resolved.ramp)
    follow_batch_schedule();
  const auto update_start = Clock::now();
  const int64_t calls_before = run_.reducer->calls();
  const UpdateWindow window =
      window_at(run_.resolved.plan, run_.data.train.size(), run_.config.last_window,
                at.position_in_epoch, run_.job.rank);
  const StepRequest request = step_request(order, window);
  reset_peak_memory();
  StepResult step;
  try {
    if (!assembler_) {
      assembler_ =
          std::make_unique<BatchAssembler>(run_.data.train, run_.resolved.plan.micro_batch_size,
                                           /*background=*/run_.config.prefetch,
                                           /*pinned=*/run_.device.is_cuda());
    }
    step = train_step(*run_.engine, *assembler_, request);
  } catch (const c10::OutOfMemoryError& oom) {
    back_off(oom);
    return false;  // the same update again, cut smaller
  }
  if (!step.completed) {
    console_.say("stopped by signal " + std::to_string(interrupts_.signal_number()) +
                 " inside update " + std::to_string(at.step + 1) + " after micro-step " +
                 std::to_string(at.micro_step) +
                 "; checkpoint written, continue with: bigbatch train --resume " + run_.run_dir);
    throw Interrupted(interrupts_.signal_number(),
                      "training interrupted inside update " + std::to_string(at.step + 1));
  }

  const int64_t peak_bytes = memory_counters().peak_bytes;
  epoch_peak_bytes_ = std::max(epoch_peak_bytes_, peak_bytes);
  const double seconds = seconds_since(update_start);
  count_update(window, step, seconds);
  const UpdateReport report{step,
                            seconds,
                            seconds_since(train_start_),
                            run_.reducer->calls() - calls_before,
                            peak_bytes,
                            at.skipped_updates,
                            noise_.noise_scale()};
  for (auto& observer : observers_)
    observer->on_update(run_, report);
  check_divergence();
  bool stop = step.stats.stop_requested;
  if (evaluation_due()) {
    evaluate_on_interval();
    // A signal during it stops here (a single process; ranks stop together, at an update).
    stop = stop || (run_.job.world_size == 1 && interrupts_.requested());
  }
  // A checkpoint at an epoch's end waits for the epoch's evaluation, so that a resumed run does
  // not evaluate that epoch twice.
  if (!epoch_used_up() && (stop || checkpoints_.due()))
    checkpoints_.write();
  return stop;
}

// The micro-steps of this update, from where a mid-window checkpoint left off. A single
// process may stop or checkpoint between them; ranks of a job do so only at update boundaries,
// where they meet.
StepRequest FitLoop::step_request(const std::vector<int64_t>& order, const UpdateWindow& window) {
  StepRequest request(order, window);
  request.first_micro_step = run_.at.micro_step;
  request.window_bn = run_.window_bn.get();
  request.noise = &noise_;
  request.rate = [this](const UpdateStats& stats) { return rate_for(stats); };
  request.stop_requested = [this] { return interrupts_.requested(); };
  request.micro_batch_tokens = run_.config.micro_batch_tokens;
  request.is_loss_spike = [this](const UpdateStats& stats) {
    return is_loss_spike(run_.at.recent_losses, stats.loss(), run_.config.spike_factor);
  };
  request.after_micro_step = [this](int64_t done, int64_t micro_steps) {
    run_.at.micro_step = done;
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

UpdateRate FitLoop::rate_for(const UpdateStats& stats) const {
  const ResolvedRun& resolved = run_.resolved;
  const TrainingProgress& at = run_.at;
  UpdateRate rate;
  if (resolved.adascale) {
    // AdaScale's gain from the averages that now include this update's gradients.
    if (noise_.state().samples > 0) {
      rate.gain =
          adascale_gain(double(stats.counts.items), double(resolved.adascale->reference_batch),
                        noise_.trace(), noise_.gradient_sq())
              .gain;
    }
    rate.lr = rate.gain * resolved.schedule.lr_at(static_cast<int64_t>(at.scale_invariant_step));
  } else if (resolved.ramp) {
    rate.lr = ramp_learning_rate(resolved, at.samples_seen, resolved.plan.global_batch_size);
  } else {
    rate.lr = resolved.schedule.lr_at(at.step);
  }
  return rate;
}

void FitLoop::count_update(const UpdateWindow& window, const StepResult& step, double seconds) {
  TrainingProgress& at = run_.at;
  const UpdateStats& stats = step.stats;
  if (run_.resolved.adascale && !stats.skipped())
    at.scale_invariant_step += step.rate.gain;
  at.noise = noise_.state();
  at.micro_step = 0;
  at.train_seconds += seconds;
  ++at.step;
  ++at.update_in_epoch;
  at.position_in_epoch += window.size;
  at.global_batch = run_.resolved.plan.global_batch_size;
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
  std::string why;
  if (stats.loss_spike) {
    const double median = recent_loss_median(at.recent_losses);
    why = "loss " + format_loss(stats.loss()) + " is " +
          format_significant(stats.loss() / median, 3) + "x the median of the last " +
          std::to_string(at.recent_losses.size()) + " applied updates (" + format_loss(median) +
          ")";
  } else {
    why = std::string(std::isfinite(stats.loss()) ? "gradient" : "loss") + " is not finite";
  }
  console_.say("warning: update " + std::to_string(at.step) + " skipped: " + why + " (" +
               std::to_string(at.bad_in_a_row) + " in a row)");
}

void FitLoop::check_divergence() {
  const TrainingProgress& at = run_.at;
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
  const bool kept = clean >= 0 && clean + 1 < first_bad;
  const int64_t bad_in_a_row = at.bad_in_a_row;
  const int64_t resume_step = kept ? clean : at.step;
  if (!kept) {
    // Resuming it is a decision to go on from these weights (with a lower rate): the guard
    // then judges the resumed run by its own losses, not by the streak that stopped this one.
    run_.at.bad_in_a_row = 0;
    run_.at.recent_losses.clear();
    checkpoints_.write();
  }
  // Said in the metrics too, so a sweep's summary can tell a diverged cell from a stopped one.
  if (run_.metrics) {  // rank 0's
    run_.metrics->write({{"event", "diverged"},
                         {"step", at.step},
                         {"samples_seen", at.samples_seen},
                         {"bad_updates_in_a_row", bad_in_a_row},
                         {"checkpoint_step", resume_step}});
  }
  // What helps, in this run's numbers: the rate that diverged and how it was reached.
  const LrSchedule& schedule = run_.resolved.schedule;
  const LrScheduleConfig& lr = schedule.config();
  const double lower = lr.base_lr / 4;
  std::string fix =
      "lower the peak rate (" + format_significant(schedule.peak_lr()) +
      (lr.reference_batch != lr.global_batch
           ? ": --lr " + format_significant(lr.base_lr) + " scaled " + to_string(lr.scaling) +
                 " from " + std::to_string(lr.reference_batch) + " to " +
                 std::to_string(lr.global_batch)
           : std::string()) +
      "), e.g. --lr " + format_significant(lower) +
      (lr.scaling == LrScaling::Linear ? " or --lr-scaling sqrt" : "") +
      "; warm up longer (--warmup, now " + std::to_string(lr.warmup_updates) + " updates)";
  if (run_.config.clip_norm <= 0)
    fix += "; clip gradients (--clip-norm 1)";
  fix += ". Then 'bigbatch train --resume " + run_.run_dir + " --lr " + format_significant(lower) +
         "' continues from update " + std::to_string(resume_step) +
         (kept ? "" : " (whose loss had already risen: a new run is the safer fix)");
  const std::string what =
      std::to_string(bad_in_a_row) + " updates in a row were skipped (" +
      std::to_string(first_bad) + " to " + std::to_string(at.step) + ": " +
      (run_.config.spike_factor > 0
           ? "a non-finite loss or gradient, or a loss over " +
                 format_significant(run_.config.spike_factor) + "x the recent median"
           : std::string("a non-finite loss or gradient")) +
      "); " +
      (kept ? "the newest checkpoint, at update " + std::to_string(resume_step) +
                  ", is from before them and is kept"
            : std::string(clean >= 0 ? "the newest checkpoint holds weights whose loss had "
                                       "already risen"
                                     : "no checkpoint came before them") +
                  ", so the weights before update " + std::to_string(first_bad) +
                  " (untouched by the skipped ones) are checkpointed");
  throw Error(ErrorKind::Diverged, what, fix);
}

// Out of memory inside a window (a budget lowered on resume, fragmentation, a larger sample):
// the window was thrown away (train_step); halve the micro-batch, raise accumulation, and
// replay the same samples. The global batch, the samples and the mathematics stay the same
// (except BatchNorm's statistics, which follow the micro-batch).
void FitLoop::back_off(const c10::OutOfMemoryError& oom) {
  TrainingProgress& at = run_.at;
  BatchPlan& plan = run_.resolved.plan;
  at.micro_step = 0;
  // What the failed window held is free again; a GPU's allocator gives its cache back too, so
  // the smaller micro-batch starts from what is really in use.
  release_cached_memory();
  const std::string what = short_out_of_memory_message(oom.what_without_backtrace());
  const int64_t from = plan.micro_batch_size;
  if (run_.job.world_size > 1) {
    throw Error(ErrorKind::Memory,
                "rank " + std::to_string(run_.job.rank) + " ran out of memory at micro-batch " +
                    std::to_string(from) + " (" + what + ")",
                "lower --micro-batch or raise --memory-budget (ranks do not back off together "
                "yet)");
  }
  if (run_.config.micro_batch_tokens > 0) {
    back_off_tokens(what);
    return;
  }
  if (from == 1) {
    throw Error(ErrorKind::Memory,
                "out of memory at micro-batch 1, the smallest there is (" + what + ")",
                "raise --memory-budget, or train a smaller model");
  }
  const int64_t to = from / 2;
  const bool batch_norm = uses_batch_statistics(*run_.model);
  if (batch_norm && run_.config.strict_batch) {
    throw Error(ErrorKind::Memory,
                "--strict-batch: out of memory at micro-batch " + std::to_string(from) +
                    ", and backing off would change " + run_.config.model +
                    "'s normalisation batch to " + std::to_string(to),
                "raise --memory-budget, or start with --micro-batch " + std::to_string(to));
  }
  plan = plan.with_micro_batch(to);
  run_.resolved.epoch = plan_epoch(plan, run_.data.train.size(), run_.config.last_window,
                                   run_.resolved.epoch.items_per_sample);
  assembler_.reset();  // the next window allocates the smaller buffer
  prepare_for_training(run_.model, run_.config, plan.accumulation_steps);  // BatchNorm momentum
  ++at.oom_backoffs;
  console_.say("warning: out of memory in update " + std::to_string(at.step + 1) +
               " at micro-batch " + std::to_string(from) + " (" + what + "); backing off to " +
               plan.describe() +
               ": the same global batch, the window replayed from its first "
               "sample");
  if (batch_norm) {
    console_.say("warning: " + run_.config.model + " now normalises over micro-batches of " +
                 std::to_string(to) + " instead of " + std::to_string(from) +
                 ", which changes its updates (use cnn-gn to be independent of the micro-batch)");
  }
  record_back_off({{"micro_batch_from", from},
                   {"micro_batch", to},
                   {"accumulation_steps", plan.accumulation_steps}},
                  what);
}

// The oom_backoff line: the update it happened in (updates done), what changed, the error.
void FitLoop::record_back_off(nlohmann::json changed, const std::string& what) {
  if (!run_.metrics)
    return;
  changed["event"] = "oom_backoff";
  changed["step"] = run_.at.step;
  changed["global_batch"] = run_.resolved.plan.global_batch_size;
  changed["error"] = what;
  run_.metrics->write(changed);
}

// Under --micro-batch-tokens the window is cut by padded tokens, so the budget is what halves:
// the same samples replayed in smaller micro-batches (the plan, the whole window, stays).
void FitLoop::back_off_tokens(const std::string& what) {
  TrainingProgress& at = run_.at;
  int64_t& budget = run_.config.micro_batch_tokens;
  const int64_t from = budget;
  // Below one row of --seq-len the budget stops grouping rows of full length, which is what
  // runs out: the floor is that row.
  const int64_t row = run_.data.train.width();
  if (from <= row) {
    throw Error(ErrorKind::Memory,
                "out of memory at --micro-batch-tokens " + std::to_string(from) +
                    ", one row of --seq-len " + std::to_string(row) + " per micro-batch (" + what +
                    ")",
                "raise --memory-budget, lower --seq-len, or train a smaller model");
  }
  budget = std::max(row, from / 2);
  ++at.oom_backoffs;
  console_.say("warning: out of memory in update " + std::to_string(at.step + 1) + " at " +
               std::to_string(from) + " padded tokens per micro-batch (" + what +
               "); backing off to " + std::to_string(budget) +
               ": the same window, replayed from its first sample in smaller micro-batches");
  record_back_off({{"micro_batch_tokens_from", from}, {"micro_batch_tokens", budget}}, what);
}

// --global-batch-schedule: at the first update boundary past a threshold, the next step's plan
// — the same micro-batch (after any back-off), accumulation re-derived, BatchNorm's momentum
// recomputed. A window resumed from a checkpoint began under the batch that the same position
// selects, so it continues unchanged.
void FitLoop::follow_batch_schedule() {
  const int64_t global = next_global_batch();
  ResolvedRun& resolved = run_.resolved;
  if (global == resolved.plan.global_batch_size)
    return;
  const TrainingProgress& at = run_.at;
  const int64_t from = resolved.plan.global_batch_size;
  resolved.plan = plan_for_ramp_step(global, resolved.plan.micro_batch_size, run_.job.world_size);
  resolved.epoch = plan_epoch(resolved.plan, run_.data.train.size(), run_.config.last_window,
                              resolved.epoch.items_per_sample);
  prepare_for_training(run_.model, run_.config, resolved.plan.accumulation_steps);
  const double next_lr = ramp_learning_rate(resolved, at.samples_seen, global);
  console_.say("global batch " + std::to_string(from) + " -> " + resolved.plan.describe() +
               " at update " + std::to_string(at.step + 1) + " (" +
               std::to_string(at.samples_seen) + " samples seen); lr now " +
               format_significant(next_lr, 4));
  if (run_.metrics && at.step + 1 != run_.update_already_logged) {
    // Keyed by the first update at the new batch. A run resumed from a checkpoint taken before
    // it drops the line and writes it again; one resumed from inside that update's window kept
    // it (it was written before the checkpoint) and announces it on stderr only.
    run_.metrics->write({{"event", "batch_change"},
                         {"step", at.step + 1},
                         {"samples_seen", at.samples_seen},
                         {"global_batch_from", from},
                         {"global_batch", global},
                         {"accumulation_steps", resolved.plan.accumulation_steps},
                         {"lr", next_lr}});
  }
}

// --- Epoch ends -------------------------------------------------------------------------------

// The record of an epoch — or of the part of one where the run ends inside it (--max-updates,
// AdaScale's scale-invariant length) — with its evaluation and the --target-accuracy check.
// Only rank 0 evaluates.
void FitLoop::record_epoch(bool ends_inside) {
  TrainingProgress& at = run_.at;
  at.recorded_epoch_step = at.step;
  if (!run_.job.is_main())
    return;
  // An epoch whose updates were all skipped (non-finite) has no training figures.
  const Counts& counts = at.epoch_counts;
  const auto per_item = [&](double total) {
    return counts.items > 0 ? nlohmann::json(total / double(counts.items))
                            : nlohmann::json(nullptr);
  };
  const auto b_noise = noise_.noise_scale();
  nlohmann::json record = {
      {"epoch", at.epoch + 1},
      {"step", at.step},
      {"samples_seen", at.samples_seen},
      {"train_loss", per_item(counts.loss_sum)},
      {"train_accuracy", per_item(double(counts.correct))},
      {"train_seconds", at.train_seconds},
      {"peak_bytes", epoch_peak_bytes_},
      {"rss_peak_bytes", peak_rss_bytes()},
      {"micro_batch", run_.resolved.plan.micro_batch_size},
      {"oom_backoffs", at.oom_backoffs},
      {"grad_noise_scale", b_noise ? nlohmann::json(*b_noise) : nlohmann::json(nullptr)}};
  // The estimate's range within two standard errors (high null: unbounded) and the run's
  // average, when the spread is known: what the report's summary states.
  if (const auto summary = noise_.summary(); summary && summary->high > 0) {
    record["grad_noise_scale_low"] = summary->low;
    record["grad_noise_scale_high"] =
        std::isfinite(summary->high) ? nlohmann::json(summary->high) : nlohmann::json(nullptr);
    record["grad_noise_scale_run_average"] = summary->run_average;
    record["grad_noise_scale_updates"] = summary->updates;
  }
  if (computes_own_loss(*run_.model) || run_.data.train.is_regression())
    record.erase("train_accuracy");  // its own loss, or values: no predictions were scored
  if (run_.data.train.is_regression() && !computes_own_loss(*run_.model) && counts.items > 0)
    record["train_rmse"] =
        std::sqrt(counts.loss_sum / double(counts.items * run_.data.train.outputs()));
  if (ends_inside)
    record["partial_epoch"] = epoch_progress(run_);
  evaluate_into(record, /*interval=*/false);
}

// An epoch's or an interval's record completed: tokens seen and the held-out figures, told to
// the observers, checked against the target.
void FitLoop::evaluate_into(nlohmann::json& record, bool interval) {
  if (run_.data.train.is_tokens())
    record["tokens_seen"] = run_.at.items_seen;
  record.update(evaluate_splits());
  for (auto& observer : observers_) {
    if (interval) {
      observer->on_evaluation(run_, EpochReport{record});
    } else {
      observer->on_epoch(run_, EpochReport{record});
    }
  }
  check_target(record);
}

nlohmann::json FitLoop::evaluate_splits() {
  if (evaluated_step_ == run_.at.step)
    return evaluated_;  // an interval's, whose target stopped the run: its epoch's record
  // Tests: a signal that arrives while the model is evaluated, at a known moment.
  if (const char* raise_signal = std::getenv("BIGBATCH_SIGNAL_AT_EVALUATION_FOR_TESTS"))
    std::raise(std::atoi(raise_signal));
  // Under a budget, evaluation runs at the training micro-batch, which inference (no saved
  // activations, no gradients) always fits; under a token budget (after any back-off), at as
  // many full rows as it holds.
  const bool tokens = run_.data.train.is_tokens();
  const int64_t eval_rows = evaluation_rows(run_.data.train);
  int64_t training_rows = run_.resolved.plan.micro_batch_size;
  if (tokens && run_.config.micro_batch_tokens > 0) {
    training_rows = std::max<int64_t>(1, run_.config.micro_batch_tokens / run_.data.train.width());
  }
  const int64_t eval_batch =
      run_.config.memory_budget > 0 ? std::min(eval_rows, training_rows) : eval_rows;
  nlohmann::json figures = nlohmann::json::object();
  if (run_.data.validation.size() > 0) {
    last_validation_ = evaluate(run_.model, run_.data.validation, eval_batch, run_.precision);
    figures.update(eval_record("val", last_validation_, tokens));
  }
  if (run_.data.test.size() > 0) {  // text corpora have no test split
    last_test_ = evaluate(run_.model, run_.data.test, eval_batch, run_.precision);
    figures.update(eval_record("test", last_test_, tokens));
  }
  evaluated_step_ = run_.at.step;
  evaluated_ = figures;
  return figures;
}

// Every eval_every_updates-th update, counted from the run's start (a resumed run keeps the
// positions), except where an epoch's end or the run's evaluates anyway.
bool FitLoop::evaluation_due() const {
  const int64_t every = run_.resolved.eval_every_updates;
  // The run's end records (and evaluates) the epoch where it stops: not twice.
  return every > 0 && run_.at.step % every == 0 && !epoch_used_up() && !run_complete();
}

void FitLoop::evaluate_on_interval() {
  if (run_.job.is_main()) {
    const TrainingProgress& at = run_.at;
    nlohmann::json record = {{"event", "evaluation"},
                             {"step", at.step},
                             {"epoch", double(at.epoch) + epoch_progress(run_)},
                             {"samples_seen", at.samples_seen},
                             {"train_seconds", at.train_seconds},
                             {"wall_s", seconds_since(train_start_)}};
    evaluate_into(record, /*interval=*/true);
  }
  share_target_verdict();
}

// --target (or --target-accuracy): on the validation split when there is one, unless the
// target names its split; the test set is not for decisions. Its metric was checked against
// the data before training (train/run_setup.h), so the record holds it.
void FitLoop::check_target(const nlohmann::json& record) {
  const std::optional<StopTarget> target = run_.config.stop_target();
  if (!target || target_reached_)  // reached at an interval, the run's end records its epoch
    return;
  const TrainingProgress& at = run_.at;
  const std::string metric = target->metric_in(run_.data.validation.size() > 0);
  const auto found = record.find(metric);
  BB_INTERNAL_ASSERT(found != record.end(), "the epoch record has no " + metric);
  const double value = found->get<double>();
  if (!target->reached(value))
    return;
  target_reached_ = true;
  // Epochs done where it was reached: a fraction at an interval's evaluation (--eval-every) or
  // where a run ends inside an epoch, a whole number at an epoch's end.
  const double epochs = record.contains("partial_epoch")
                            ? double(at.epoch) + record["partial_epoch"].get<double>()
                            : record["epoch"].get<double>();
  nlohmann::json event = {{"event", "target_reached"},
                          {"step", at.step},
                          {"epoch", epochs},
                          {"samples_seen", at.samples_seen},
                          {"tokens_seen", at.items_seen},
                          {"train_seconds", at.train_seconds},
                          {"metric", metric},
                          {"value", value},
                          {"target", target->value},
                          {"condition", target->to_string()}};
  if (target->metric == "accuracy")
    event["accuracy"] = value;  // the field's name before --target generalised it
  run_.metrics->write(event);
  const bool percent = target->metric == "accuracy";
  const std::string shown =
      percent ? format_significant(100 * value) + "%" : format_significant(value);
  const std::string goal =
      percent ? format_significant(100 * target->value) + "%" : format_significant(target->value);
  console_.say("target reached: " + metric + " " + shown + (target->at_least ? " >= " : " <= ") +
               goal + " after " + std::to_string(at.step) + " updates, " +
               std::to_string(at.samples_seen) + " samples, " + human_duration(at.train_seconds) +
               " of training; stopping");
}

void FitLoop::share_target_verdict() {
  if (run_.config.stop_target() && run_.job.world_size > 1) {
    std::vector<torch::Tensor> verdict = {torch::tensor({target_reached_ ? 1 : 0})};
    run_.reducer->broadcast_from_first_rank(verdict);
    target_reached_ = verdict[0].item<int64_t>() != 0;
  }
}

void FitLoop::start_next_epoch() {
  share_target_verdict();
  TrainingProgress& at = run_.at;
  at.epoch += 1;
  epoch_peak_bytes_ = 0;
  at.update_in_epoch = 0;
  at.position_in_epoch = 0;
  at.epoch_counts = Counts{};
}

void FitLoop::stop_after_update() const {
  const int signal_number = interrupts_.requested() ? interrupts_.signal_number() : SIGTERM;
  console_.say("stopped by signal " + std::to_string(signal_number) + " after update " +
               std::to_string(run_.at.step) +
               "; checkpoint written, continue with: bigbatch train --resume " + run_.run_dir);
  throw Interrupted(signal_number,
                    "training interrupted at update " + std::to_string(run_.at.step));
}

// --- The end of the run -----------------------------------------------------------------------

void FitLoop::finish() {
  const TrainingProgress& at = run_.at;
  // A run that ends inside an epoch (its length, or a target reached at an interval's
  // evaluation) is recorded where it ends, once: a resumed run with nothing left to train finds
  // that record already written.
  if (at.update_in_epoch > 0 && at.recorded_epoch_step != at.step)
    record_epoch(/*ends_inside=*/true);
  if (run_.resolved.adascale) {
    console_.say(
        describe_adascale_run(at.step, at.scale_invariant_step, run_.resolved.adascale->scale));
  }
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
  if (const auto b_noise = noise_.summary()) {
    // A language model's mean, and so its noise scale, is over tokens: so is the batch here.
    const double per_sample = run_.resolved.epoch.items_per_sample;
    const bool tokens = per_sample > 0;
    const double batch = double(run_.resolved.plan.global_batch_size) * (tokens ? per_sample : 1);
    console_.say(critical_batch_verdict(batch, *b_noise, tokens ? "tokens" : "samples"));
  } else if (noise_.state().samples == 0) {
    console_.say(
        "gradient noise scale: not measured (it needs two batch sizes per update: "
        "accumulation steps of 2 or more)");
  }
}

}  // namespace bigbatch
