#include "train/fit_observers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "core/text.h"
#include "runtime/runtime_env.h"

namespace bigbatch {

namespace {

nlohmann::json optional_number(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// " | test loss 0.3521 acc 87.52% | val loss 2.1034 bpb 3.0345": the held-out figures of an
// epoch's or an interval's record (validation accuracy apart: it closes the line).
std::string held_out_summary(const nlohmann::json& record) {
  std::string text;
  char line[256];
  if (record.contains("test_loss")) {
    text += " | test loss " + format_loss(record["test_loss"].get<double>());
    if (record.contains("test_accuracy")) {
      std::snprintf(line, sizeof line, " acc %.2f%%", 100 * record["test_accuracy"].get<double>());
      text += line;
    }
    if (record.contains("test_rmse")) {
      std::snprintf(line, sizeof line, " rmse %.4g", record["test_rmse"].get<double>());
      text += line;
    }
  }
  if (record.contains("val_rmse")) {
    std::snprintf(line, sizeof line, " | val rmse %.4g", record["val_rmse"].get<double>());
    text += line;
  }
  if (record.contains("val_perplexity")) {  // a language model
    std::snprintf(line, sizeof line, " | val loss %.4f", record["val_loss"].get<double>());
    text += line;
    if (record.contains("val_bpb")) {
      std::snprintf(line, sizeof line, " bpb %.4f", record["val_bpb"].get<double>());
      text += line;
    }
  }
  return text;
}

std::string validation_accuracy_summary(const nlohmann::json& record) {
  if (!record.contains("val_accuracy") || record.contains("val_perplexity"))
    return {};
  return " | val acc " +
         format_double(std::round(1e4 * record["val_accuracy"].get<double>()) / 100) + "%";
}

std::string epoch_summary(const nlohmann::json& record, const TrainingProgress& at) {
  std::string text = "epoch " + std::to_string(record["epoch"].get<int64_t>());
  if (record.contains("partial_epoch")) {
    text += " (first " + format_double(std::round(100 * record["partial_epoch"].get<double>())) +
            "%, where the run ends)";
  }
  char line[256];
  if (record["train_loss"].is_null()) {
    text += ": train loss - (every update skipped)";
  } else {
    text += ": train loss " + format_loss(record["train_loss"].get<double>());
    if (record.contains("train_accuracy")) {
      std::snprintf(line, sizeof line, " acc %.2f%%", 100 * record["train_accuracy"].get<double>());
      text += line;
    }
  }
  text += held_out_summary(record);
  text += " | " + human_count(double(at.samples_seen) / at.train_seconds) + " samples/s";
  if (at.items_seen != at.samples_seen)
    text += ", " + human_count(double(at.items_seen) / at.train_seconds) + " tokens/s";
  return text + validation_accuracy_summary(record);
}

// An interval's evaluation (--eval-every): where it stands and what the held-out splits say.
std::string evaluation_summary(const nlohmann::json& record) {
  return "update " + std::to_string(record["step"].get<int64_t>()) + " (epoch " +
         format_significant(record["epoch"].get<double>(), 3) + "): evaluated" +
         held_out_summary(record) + validation_accuracy_summary(record);
}

// metrics.jsonl, and the same record (its time stamp included) as TensorBoard events.
void log(const TrainingRun& run, nlohmann::json record) {
  const nlohmann::json written = run.metrics->write(std::move(record));
  if (run.tensorboard)
    run.tensorboard->write(written);
}

}  // namespace

void MetricsLog::on_update(const TrainingRun& run, const UpdateReport& update) {
  if (!run.metrics)
    return;
  const TrainingProgress& at = update.at;
  const UpdateStats& stats = update.step.stats;
  const RunSchedule& schedule = *run.state.schedule;
  const BatchPlan& plan = schedule.plan();
  nlohmann::json record = {{"step", at.step},
                           {"epoch", double(at.epoch) + schedule.epoch_progress(at)},
                           {"samples_seen", at.samples_seen},
                           {"loss", stats.loss()},
                           {"lr", update.step.rate.lr},
                           {"grad_norm", stats.grad_norm},
                           {"items", stats.counts.items},
                           {"micro_steps", stats.micro_steps},
                           {"allreduce_calls", update.allreduce_calls},
                           {"samples_per_s", double(stats.counts.samples) / update.seconds},
                           {"updates_per_s", 1.0 / update.seconds},
                           {"wall_s", update.wall_seconds},
                           {"skipped", stats.skipped()},
                           {"skipped_updates", update.skipped_updates},
                           {"micro_batch", plan.micro_batch_size},
                           {"global_batch", plan.global_batch_size},
                           {"grad_noise_scale", optional_number(update.noise_scale)},
                           {"peak_bytes", update.peak_bytes},
                           {"rss_peak_bytes", peak_rss_bytes()}};
  if (stats.loss_spike)
    record["loss_spike"] = true;  // skipped for its loss, not for a non-finite value
  if (schedule.measures_gain()) {
    record["lr_gain"] = update.step.rate.gain;
    record["scale_invariant_step"] = at.scale_invariant_step;
  }
  if (run.data.train.is_tokens()) {
    record["tokens_seen"] = at.items_seen;
    record["tokens_per_s"] = double(stats.counts.items) / update.seconds;
    record["padded_tokens"] = update.step.padded_tokens;
    if (schedule.micro_batch_tokens() > 0)  // the micro-batches' bound (after any back-off)
      record["micro_batch_tokens"] = schedule.micro_batch_tokens();
  }
  log(run, std::move(record));
}

void MetricsLog::on_epoch(const TrainingRun& run, const EpochReport& epoch) {
  if (!run.metrics)
    return;
  log(run, epoch.record);
  run.metrics->flush();
  if (run.tensorboard)
    run.tensorboard->flush();
}

void MetricsLog::on_evaluation(const TrainingRun& run, const EpochReport& evaluation) {
  on_epoch(run, evaluation);  // a record like an epoch's, flushed at once
}

void MetricsLog::on_event(const TrainingRun& run, const RunEvent& event) {
  if (run.metrics && !event.record.is_null())
    log(run, event.record);
}

void ProgressDisplay::on_evaluation(const TrainingRun&, const EpochReport& evaluation) {
  console_.say(evaluation_summary(evaluation.record));
}

void ProgressDisplay::on_event(const TrainingRun&, const RunEvent& event) {
  for (const auto& line : event.lines)
    console_.say(line);
}

void ProgressDisplay::on_update(const TrainingRun& run, const UpdateReport& update) {
  const TrainingProgress& at = update.at;
  const RunLength length = run.state.schedule->expected_length(at);
  ProgressState state;
  state.epoch = at.epoch + 1;
  state.epochs = length.epochs;
  state.step_in_epoch = at.update_in_epoch;
  state.updates_per_epoch = length.updates_per_epoch;
  state.step = at.step;
  state.total_updates = length.total_updates;
  if (run.state.schedule->measures_gain())
    state.lr_gain = update.step.rate.gain;
  state.loss = update.step.stats.loss();
  state.samples_per_s = double(at.samples_seen) / at.train_seconds;
  state.elapsed_s = at.train_seconds;
  state.memory_bytes = update.peak_bytes;
  state.global_batch = run.state.schedule->plan().global_batch_size;
  state.noise_scale = update.noise_scale.value_or(0);
  state.schedule_status = run.state.schedule->status(at);
  console_.show(state);
}

void ProgressDisplay::on_epoch(const TrainingRun& run, const EpochReport& epoch) {
  console_.say(epoch_summary(epoch.record, run.state.at));
}

FitObservers::FitObservers(Console& console) {
  observers_.push_back(std::make_unique<MetricsLog>());
  observers_.push_back(std::make_unique<ProgressDisplay>(console));
}

void FitObservers::update(const TrainingRun& run, const UpdateReport& report) {
  if (held_) {
    held_->push_back({std::nullopt, report.step, report.at, report.seconds, report.wall_seconds,
                      report.allreduce_calls, report.peak_bytes, report.skipped_updates,
                      report.noise_scale});
    return;
  }
  for (auto& observer : observers_)
    observer->on_update(run, report);
}

void FitObservers::event(const TrainingRun& run, const RunEvent& event) {
  if (held_) {
    HeldRecord record;
    record.event = event;
    held_->push_back(std::move(record));
    return;
  }
  for (auto& observer : observers_)
    observer->on_event(run, event);
}

void FitObservers::epoch(const TrainingRun& run, const EpochReport& epoch) {
  BB_INTERNAL_ASSERT(!held_, "an epoch ended inside a branch test");
  for (auto& observer : observers_)
    observer->on_epoch(run, epoch);
}

void FitObservers::evaluation(const TrainingRun& run, const EpochReport& evaluation) {
  BB_INTERNAL_ASSERT(!held_, "an evaluation inside a branch test");
  for (auto& observer : observers_)
    observer->on_evaluation(run, evaluation);
}

void FitObservers::hold() {
  BB_INTERNAL_ASSERT(!held_, "a branch inside a branch");
  held_.emplace();
}

FitObservers::Held FitObservers::release() {
  Held held = std::move(*held_);
  held_.reset();
  return held;
}

void FitObservers::tell(const TrainingRun& run, const Held& held) {
  for (const HeldRecord& record : held) {
    if (record.event) {
      event(run, *record.event);
    } else {
      update(run, UpdateReport{*record.step, record.at, record.seconds, record.wall_seconds,
                               record.allreduce_calls, record.peak_bytes, record.skipped_updates,
                               record.noise_scale});
    }
  }
}

}  // namespace bigbatch
