#pragma once
// What the fit loop tells besides its updates and epochs, in words and as metrics.jsonl events:
// a skipped update, a switch of global batch, an out-of-memory back-off, a target reached, and
// divergence. The loop states the facts; these functions choose the words and the record, and
// the loop's observers (train/fit_observers.h) write and show them. Torch-free.
//
//   RunEvent event = batch_change_event(change, /*first_step=*/41, /*samples_seen=*/10240);
//   metrics.write(event.record);                     // MetricsLog
//   for (const auto& line : event.lines) say(line);  // ProgressDisplay
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/stop_target.h"
#include "core/error.h"
#include "schedule/lr_schedule.h"
#include "schedule/run_schedule.h"
#include "state/training_progress.h"
#include "stats/gradient_noise.h"

namespace bigbatch {

struct RunEvent {
  nlohmann::json record;           // the metrics.jsonl line; null: none
  std::vector<std::string> lines;  // said on the terminal (rank 0)
};

// "warning: update 12 skipped: loss 4.1 is 11.2x the median of the last 32 applied updates
// (0.366) (1 in a row)" — `at` has counted the update.
RunEvent skipped_update_event(const TrainingProgress& at, double loss, bool loss_spike);

// A ramp's switch at the boundary before update `first_step` (1-based: the first update at the
// new batch).
RunEvent batch_change_event(const BatchChange& change, int64_t first_step, int64_t samples_seen);

// --global-batch auto's check of the batch after update `check.step`: always a record (the
// prediction and the decision); a line when the batch doubles.
RunEvent batch_check_event(const BatchCheck& check);

// A branch test of `proposal` begins (a line; the batch_check record said it was proposed).
RunEvent branch_test_start_event(const BatchDecision& proposal);
// A branch test decided, the run at update `step` of the kept branch: a "batch_test" record and
// a line with both losses, the difference, its standard error and the bound.
RunEvent branch_test_event(const BatchTest& test, int64_t step);

// An out-of-memory back-off in update `at.step + 1`: the micro-batch halved to `plan`'s (with
// `batch_norm_model` named when the model normalises over micro-batches, "" otherwise), or a
// token budget halved from `from_tokens` to `to_tokens`. `error` is the allocator's message.
RunEvent micro_batch_back_off_event(const TrainingProgress& at, const std::string& error,
                                    int64_t from, const BatchPlan& plan,
                                    const std::string& batch_norm_model);
RunEvent token_back_off_event(const TrainingProgress& at, const std::string& error,
                              int64_t global_batch, int64_t from_tokens, int64_t to_tokens);

// --target met by `value` of `metric` after `epochs` (fractional where reached inside one).
RunEvent target_reached_event(const TrainingProgress& at, const StopTarget& target,
                              const std::string& metric, double value, double epochs);

// --keep-best: RUN/best.safetensors now holds the weights of update at.step, whose `metric`
// was `value` (a record; no line: the run's end says where the best was).
RunEvent best_weights_event(const TrainingProgress& at, const std::string& metric, double value);
// --early-stop: `metric` has not improved by more than `min_delta` on its best (at.early_stop)
// for `patience` evaluations; the run stops here.
RunEvent early_stop_event(const TrainingProgress& at, const std::string& metric, int64_t patience,
                          double min_delta);
// The run's last word on --keep-best: where its best was and the file that holds it.
std::string best_weights_line(const MetricWatch& best, const std::string& metric,
                              const std::string& path);

// The run's first metrics.jsonl line: where it starts (a resumed run's step), on which device,
// with how much memory in use.
RunEvent train_start_event(const TrainingProgress& at, const std::string& device,
                           int64_t tensor_bytes, int64_t rss_bytes);

// What an epoch's record says besides the progress counters and the noise scale.
struct EpochFacts {
  int64_t peak_bytes = 0;          // the tensors' peak over the epoch
  int64_t rss_peak_bytes = 0;      // the process's resident peak
  int64_t micro_batch = 0;         // the plan's at the epoch's end
  bool scores_predictions = true;  // the task scores predictions: a training accuracy
  int64_t regression_outputs = 0;  // values per sample of a regression (0: not one): the RMSE
  // The fraction of the epoch trained, where the run ends inside it (--max-updates, AdaScale's
  // scale-invariant length); none for a whole epoch.
  std::optional<double> partial_epoch;
};
// The metrics.jsonl record of an epoch before its held-out figures: the training figures of its
// applied updates (an epoch whose updates were all skipped has none: nulls), memory, and the
// gradient noise scale with its range within two standard errors (high null: unbounded) and
// the run's average, when the spread is known — what the report's summary states.
nlohmann::json epoch_record(const TrainingProgress& at, const NoiseScaleTracker& noise,
                            const EpochFacts& facts);
// The record of an --eval-every evaluation before its held-out figures; `epoch` fractional.
nlohmann::json evaluation_record(const TrainingProgress& at, double epoch, double wall_s);

// A signal's stop, where a resume continues: after update at.step, or inside the update after
// it (after micro-step at.micro_step, the open window in the checkpoint). `relaunch`: the launch
// command a resume goes under ("bigbatch launch --nproc 2"), empty for one process.
enum class StopPoint { AfterUpdate, InsideUpdate };
std::string stopped_by_signal_line(int signal_number, const TrainingProgress& at, StopPoint where,
                                   const std::string& run_dir, const std::string& relaunch = "");

// The run's last word on its batch size: the critical-batch verdict from the noise scale (of
// `global_batch` samples, or of tokens when items_per_sample > 0: a language model's mean is
// over tokens), or why there is none; "" when nothing can be said.
std::string batch_size_verdict(const NoiseScaleTracker& noise, int64_t global_batch,
                               double items_per_sample);

// --max-bad-updates skipped updates in a row: the run stops, from a checkpoint before them when
// one was kept, else from the weights as they stand.
struct Divergence {
  int64_t step = 0;  // updates done, the last bad one included
  int64_t samples_seen = 0;
  int64_t bad_in_a_row = 0;
  int64_t resume_step = 0;      // the checkpoint a resume continues from
  bool kept = false;            // resume_step's checkpoint is from before the streak
  bool had_checkpoint = false;  // a checkpoint existed (its loss had already risen)
  double spike_factor = 0;      // --spike-factor (0: only non-finite updates are bad)
  bool clipping = false;        // --clip-norm is set
  std::string run_dir;
  const LrSchedule* schedule = nullptr;  // the rates the run trained at
};
RunEvent diverged_event(const Divergence& d);
// The error the run stops with: what happened, and what helps in this run's numbers.
Error divergence_error(const Divergence& d);

}  // namespace bigbatch
