#include "train/checkpointer.h"

#include <algorithm>

#include "core/clock.h"
#include "report/plan_report.h"

namespace bigbatch {

Checkpointer::Checkpointer(TrainingRun& run)
    : run_(run),
      cadence_(run.config.checkpoint_every.empty() ? Cadence{}
                                                   : Cadence::parse(run.config.checkpoint_every)),
      last_step_(run.state.at.step),
      last_time_(SteadyClock::now()),
      last_clean_step_(run.resuming && run.state.at.bad_in_a_row == 0 ? run.state.at.step : -1) {
  if (cadence_.amount) {
    cadence_updates_ = std::max<int64_t>(
        1, cadence_.amount->to_updates(run.state.schedule->plan(), run.state.schedule->epoch()));
  }
}

// While updates are being skipped, checkpoints wait for the next applied one: should the run
// diverge, its newest checkpoint is then one from before the trouble.
bool Checkpointer::due() const {
  if (run_.state.at.bad_in_a_row > 0)
    return false;
  // A micro-step cadence whose checkpoint falls on a window's end is written there, at the
  // update boundary, so that the cadence keeps its period.
  if (cadence_.micro_steps > 0 && micro_steps_since_ >= cadence_.micro_steps)
    return true;
  if (cadence_updates_ > 0 && run_.state.at.step - last_step_ >= cadence_updates_)
    return true;
  return cadence_.seconds > 0 && seconds_since(last_time_) >= cadence_.seconds;
}

bool Checkpointer::due_inside_window() const {
  return run_.state.at.bad_in_a_row == 0 && cadence_.micro_steps > 0 &&
         micro_steps_since_ >= cadence_.micro_steps;
}

// A checkpoint's metrics lines reach the file before it does: a run killed after it resumes
// with every line up to it.
void Checkpointer::flush_metrics() {
  if (run_.metrics) {
    run_.metrics->flush();
    run_.state.at.metrics_bytes = run_.metrics->flushed_bytes();
  }
  if (run_.tensorboard)  // for a TensorBoard that watches; a resume rebuilds it from metrics
    run_.tensorboard->flush();
}

void Checkpointer::write() {
  flush_metrics();
  torch::optim::Optimizer* optimizer = run_.optimizer.get();
  std::unique_ptr<torch::optim::Optimizer> whole;
  if (run_.shards) {
    // Every rank sends its share; rank 0 writes the whole state, the same layout as unsharded.
    if (run_.job.is_main())
      whole = run_.shards->make_whole_optimizer();
    run_.shards->gather_whole(whole.get());
    optimizer = whole.get();
  }
  if (run_.job.is_main()) {
    write_checkpoint(run_.run_dir, run_.state.at, run_.identity, *run_.model, *optimizer,
                     run_.config.keep_checkpoints, plan_json(run_.resolved_now()));
  }
  last_step_ = run_.state.at.step;
  last_time_ = SteadyClock::now();
  micro_steps_since_ = 0;
  note_written();
}

void Checkpointer::note_written() {
  last_clean_step_ = run_.state.at.bad_in_a_row == 0 ? run_.state.at.step : -1;
}

// Only a single process checkpoints inside a window (ranks meet at update boundaries only).
void Checkpointer::write_inside_window() {
  flush_metrics();
  PartialWindow window{run_.state.schedule->plan().micro_batch_size,
                       run_.job.world_size,
                       run_.state.schedule->micro_batch_tokens(),
                       run_.engine->window_state(),
                       {}};
  for (const auto& p : run_.model->parameters())
    window.gradients.push_back(p.grad());
  if (run_.window_bn)
    run_.window_bn->suspend();  // the checkpoint holds the running statistics, not the window's
  write_checkpoint(run_.run_dir, run_.state.at, run_.identity, *run_.model, *run_.optimizer,
                   run_.config.keep_checkpoints, plan_json(run_.resolved_now()), &window);
  if (run_.window_bn)
    run_.window_bn->resume();
  micro_steps_since_ = 0;
  note_written();
}

}  // namespace bigbatch
