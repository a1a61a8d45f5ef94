#include "report/run_events.h"

#include <cmath>

#include "core/text.h"
#include "stats/loss_spikes.h"

namespace bigbatch {

RunEvent skipped_update_event(const TrainingProgress& at, double loss, bool loss_spike) {
  std::string why;
  if (loss_spike) {
    const double median = recent_loss_median(at.recent_losses);
    why = "loss " + format_loss(loss) + " is " + format_significant(loss / median, 3) +
          "x the median of the last " + std::to_string(at.recent_losses.size()) +
          " applied updates (" + format_loss(median) + ")";
  } else {
    why = std::string(std::isfinite(loss) ? "gradient" : "loss") + " is not finite";
  }
  return {nullptr,
          {"warning: update " + std::to_string(at.step) + " skipped: " + why + " (" +
           std::to_string(at.bad_in_a_row) + " in a row)"}};
}

RunEvent batch_change_event(const BatchChange& change, int64_t first_step, int64_t samples_seen) {
  const BatchPlan& plan = change.plan;
  RunEvent event{
      {{"event", "batch_change"},
       {"step", first_step},
       {"samples_seen", samples_seen},
       {"global_batch_from", change.from_global_batch},
       {"global_batch", plan.global_batch_size},
       {"accumulation_steps", plan.accumulation_steps},
       {"lr", change.lr}},
      {"global batch " + std::to_string(change.from_global_batch) + " -> " + plan.describe() +
       " at update " + std::to_string(first_step) + " (" + std::to_string(samples_seen) +
       " samples seen); lr now " + format_significant(change.lr, 4) +
       (change.rate_factors.empty() ? std::string() : " = " + change.rate_factors)}};
  if (const auto& adam = change.adam) {
    event.record["adam_beta1"] = adam->beta1;
    event.record["adam_beta2"] = adam->beta2;
    event.record["adam_eps"] = adam->eps;
    event.lines.front() += ", " + describe(*adam);
  }
  return event;
}

RunEvent batch_check_event(const BatchCheck& check) {
  const auto finite_or_null = [](double value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  };
  RunEvent event;
  event.record = {{"event", "batch_check"},
                  {"step", check.step},
                  {"samples_seen", check.samples_seen},
                  {"global_batch", check.batch},
                  {"proposed", check.proposed},
                  {"noise_scale", check.noise.value},
                  {"noise_scale_low", check.noise.low},
                  {"noise_scale_high", finite_or_null(check.noise.high)},
                  {"update_cost", check.update_cost},
                  {"goodput_gain", check.goodput_gain},
                  {"predicted_at", growth_prediction_names().name(check.predicted_at)},
                  {"updates_factor", check.updates_factor},
                  {"samples_factor", check.samples_factor},
                  {"grow", check.grow}};
  if (check.test_samples > 0)
    event.record["test_samples"] = check.test_samples;
  if (!check.grow && check.test_samples == 0) {
    event.record["reason"] = check.reason;
    return event;
  }
  const std::string high =
      std::isfinite(check.noise.high) ? format_significant(check.noise.high, 3) : "unbounded";
  event.lines.push_back(
      "automatic batch: " + std::string(check.grow ? "" : "proposing ") +
      std::to_string(check.batch) + " -> " + std::to_string(check.proposed) + " after update " +
      std::to_string(check.step) + ": noise scale " + format_significant(check.noise.value, 3) +
      " (" + format_significant(check.noise.low, 3) + " to " + high + "), an update costs " +
      format_significant(check.update_cost, 4) + " samples of compute; predicted " +
      format_fixed(check.goodput_gain, 3) + "x the goodput at the " +
      (check.predicted_at == GrowthPrediction::BandLow ? "band's low end, " : "estimate, ") +
      format_fixed(check.updates_factor, 2) + "x the updates and " +
      format_fixed(check.samples_factor, 2) + "x the samples to a loss");
  return event;
}

RunEvent branch_test_start_event(const BatchDecision& proposal) {
  RunEvent event;
  event.lines.push_back("automatic batch: testing " + std::to_string(proposal.to_batch) +
                        " against " + std::to_string(proposal.from_batch) + ": both train the " +
                        std::to_string(proposal.test_samples) + " samples from sample " +
                        std::to_string(proposal.samples_seen) + ", then score the samples set " +
                        "aside");
  return event;
}

RunEvent branch_test_event(const BatchTest& test, int64_t step) {
  const BatchDecision& p = test.proposal;
  RunEvent event;
  event.record = {{"event", "batch_test"},
                  {"step", step},
                  {"started_step", p.step},
                  {"samples_seen", p.samples_seen},
                  {"test_samples", p.test_samples},
                  {"global_batch", p.from_batch},
                  {"proposed", p.to_batch},
                  {"start_loss", test.start_loss},
                  {"current_loss", test.current_loss},
                  {"doubled_loss", test.doubled_loss},
                  {"difference", test.difference},
                  {"standard_error", test.standard_error},
                  {"bound", test.bound},
                  {"confidence", test.confidence},
                  {"control_rate_factor", test.control_rate_factor},
                  {"branches", test.branches},
                  {"kept", test.kept},
                  {"extra_seconds", test.extra_seconds}};
  // The share of the current batch's progress the doubled one made, when there was progress.
  const double gained = test.start_loss - test.current_loss;
  const std::string from = std::to_string(p.from_batch);
  // Under a control: the current batch trained at the doubled batch's noise temperature.
  const bool control = test.control_rate_factor != 1;
  const std::string compared =
      from + (control ? " at " + format_significant(test.control_rate_factor, 3) + "x its rate"
                      : std::string());
  std::string share = compared + " made no progress";
  if (gained > 0) {
    share = std::to_string(p.to_batch) + " made " +
            format_fixed(100 * (test.start_loss - test.doubled_loss) / gained, 0) + "% of " +
            (control ? "the progress of " + compared : from + "'s progress");
  }
  event.lines.push_back(
      "automatic batch: " + std::string(test.kept ? "kept " : "stays at ") +
      std::to_string(test.kept ? p.to_batch : p.from_batch) + ": from loss " +
      format_significant(test.start_loss, 5) + ", " + std::to_string(p.to_batch) + " reached " +
      format_significant(test.doubled_loss, 5) + " and " + compared + " " +
      format_significant(test.current_loss, 5) + " (" + share + "; difference " +
      format_significant(test.difference, 2) + " +- " + format_significant(test.standard_error, 2) +
      ", kept when it is at most " + format_significant(test.bound, 2) +
      (test.confidence > 0
           ? " with " + format_significant(test.confidence, 3) + " standard errors to spare"
           : std::string()) +
      "); the test took " + format_significant(test.extra_seconds, 2) +
      " s more than the kept branch (" +
      (test.branches > 2
           ? std::to_string((test.branches - 1) * p.test_samples) +
                 " samples of the doubled branch and the control thrown away, " + from +
                 " trained again at its rate"
           : std::to_string(p.test_samples) + " samples of the other branch thrown away") +
      ")");
  return event;
}

RunEvent train_start_event(const TrainingProgress& at, const std::string& device,
                           int64_t tensor_bytes, int64_t rss_bytes) {
  return {{{"event", "train_start"},
           {"step", at.step},
           {"device", device},
           {"tensor_bytes", tensor_bytes},
           {"rss_bytes", rss_bytes}},
          {}};
}

nlohmann::json epoch_record(const TrainingProgress& at, const NoiseScaleTracker& noise,
                            const EpochFacts& facts) {
  const Counts& counts = at.epoch_counts;
  const auto per_item = [&](double total) {
    return counts.items > 0 ? nlohmann::json(total / double(counts.items))
                            : nlohmann::json(nullptr);
  };
  const auto b_noise = noise.noise_scale();
  nlohmann::json record = {
      {"epoch", at.epoch + 1},
      {"step", at.step},
      {"samples_seen", at.samples_seen},
      {"train_loss", per_item(counts.loss_sum)},
      {"train_accuracy", per_item(double(counts.correct))},
      {"train_seconds", at.train_seconds},
      {"peak_bytes", facts.peak_bytes},
      {"rss_peak_bytes", facts.rss_peak_bytes},
      {"micro_batch", facts.micro_batch},
      {"oom_backoffs", at.oom_backoffs},
      {"grad_noise_scale", b_noise ? nlohmann::json(*b_noise) : nlohmann::json(nullptr)}};
  if (const auto summary = noise.summary(); summary && summary->high > 0) {
    record["grad_noise_scale_low"] = summary->low;
    record["grad_noise_scale_high"] =
        std::isfinite(summary->high) ? nlohmann::json(summary->high) : nlohmann::json(nullptr);
    record["grad_noise_scale_run_average"] = summary->run_average;
    record["grad_noise_scale_updates"] = summary->updates;
  }
  if (!facts.scores_predictions)
    record.erase("train_accuracy");  // its own loss, or values: no predictions were scored
  if (facts.regression_outputs > 0 && counts.items > 0)
    record["train_rmse"] =
        std::sqrt(counts.loss_sum / double(counts.items * facts.regression_outputs));
  if (facts.partial_epoch)
    record["partial_epoch"] = *facts.partial_epoch;
  return record;
}

nlohmann::json evaluation_record(const TrainingProgress& at, double epoch, double wall_s) {
  return {{"event", "evaluation"},
          {"step", at.step},
          {"epoch", epoch},
          {"samples_seen", at.samples_seen},
          {"train_seconds", at.train_seconds},
          {"wall_s", wall_s}};
}

std::string stopped_by_signal_line(int signal_number, const TrainingProgress& at, StopPoint where,
                                   const std::string& run_dir, const std::string& relaunch) {
  const std::string point = where == StopPoint::InsideUpdate
                                ? "inside update " + std::to_string(at.step + 1) +
                                      " after micro-step " + std::to_string(at.micro_step)
                                : "after update " + std::to_string(at.step);
  return "stopped by signal " + std::to_string(signal_number) + " " + point +
         "; checkpoint written, continue with: " + (relaunch.empty() ? "" : relaunch + " -- ") +
         "bigbatch train --resume " + run_dir;
}

std::string batch_size_verdict(const NoiseScaleTracker& noise, int64_t global_batch,
                               double items_per_sample) {
  if (const auto b_noise = noise.summary()) {
    const bool tokens = items_per_sample > 0;
    const double batch = double(global_batch) * (tokens ? items_per_sample : 1);
    std::string verdict = critical_batch_verdict(batch, *b_noise, tokens ? "tokens" : "samples");
    if (noise.state().preconditioned)
      verdict += " (of the preconditioned gradient, the update's direction: --noise-gradient)";
    return verdict;
  }
  if (noise.state().samples == 0) {
    return "gradient noise scale: not measured (it needs two batch sizes per update: "
           "accumulation steps of 2 or more)";
  }
  return "";
}

namespace {

// The oom_backoff line: the update it happened in (updates done), what changed, the error.
nlohmann::json back_off_record(nlohmann::json changed, const TrainingProgress& at,
                               int64_t global_batch, const std::string& error) {
  changed["event"] = "oom_backoff";
  changed["step"] = at.step;
  changed["global_batch"] = global_batch;
  changed["error"] = error;
  return changed;
}

}  // namespace

RunEvent micro_batch_back_off_event(const TrainingProgress& at, const std::string& error,
                                    int64_t from, const BatchPlan& plan,
                                    const std::string& batch_norm_model) {
  const int64_t to = plan.micro_batch_size;
  RunEvent event{
      back_off_record({{"micro_batch_from", from},
                       {"micro_batch", to},
                       {"accumulation_steps", plan.accumulation_steps}},
                      at, plan.global_batch_size, error),
      {"warning: out of memory in update " + std::to_string(at.step + 1) + " at micro-batch " +
       std::to_string(from) + " (" + error + "); backing off to " + plan.describe() +
       ": the same global batch, the window replayed from its first sample"}};
  if (!batch_norm_model.empty()) {
    event.lines.push_back("warning: " + batch_norm_model +
                          " now normalises over micro-batches of " + std::to_string(to) +
                          " instead of " + std::to_string(from) +
                          ", which changes its updates (use cnn-gn to be independent of the "
                          "micro-batch)");
  }
  return event;
}

RunEvent token_back_off_event(const TrainingProgress& at, const std::string& error,
                              int64_t global_batch, int64_t from_tokens, int64_t to_tokens) {
  return {
      back_off_record({{"micro_batch_tokens_from", from_tokens}, {"micro_batch_tokens", to_tokens}},
                      at, global_batch, error),
      {"warning: out of memory in update " + std::to_string(at.step + 1) + " at " +
       std::to_string(from_tokens) + " padded tokens per micro-batch (" + error +
       "); backing off to " + std::to_string(to_tokens) +
       ": the same window, replayed from its first sample in smaller micro-batches"}};
}

namespace {

// "val_accuracy 91.2%", "val_loss 0.4123".
std::string metric_value_text(const std::string& metric, double value) {
  const bool percent = metric.size() >= 8 && metric.compare(metric.size() - 8, 8, "accuracy") == 0;
  return metric + " " +
         (percent ? format_significant(100 * value, 4) + "%" : format_significant(value, 4));
}

}  // namespace

RunEvent best_weights_event(const TrainingProgress& at, const std::string& metric, double value) {
  return {{{"event", "best_weights"},
           {"step", at.step},
           {"samples_seen", at.samples_seen},
           {"metric", metric},
           {"value", value}},
          {}};
}

RunEvent early_stop_event(const TrainingProgress& at, const std::string& metric, int64_t patience,
                          double min_delta) {
  const MetricWatch& watch = at.early_stop;
  RunEvent event{
      {{"event", "early_stop"},
       {"step", at.step},
       {"samples_seen", at.samples_seen},
       {"metric", metric},
       {"best", watch.seen ? nlohmann::json(watch.best) : nlohmann::json(nullptr)},
       {"best_step", watch.seen ? nlohmann::json(watch.best_step) : nlohmann::json(nullptr)},
       {"patience", patience},
       {"min_delta", min_delta}},
      {}};
  const std::string stopping = " (--patience " + std::to_string(patience) +
                               "); stopping at update " + std::to_string(at.step);
  if (!watch.seen) {
    event.lines.push_back("early stop: " + metric + " was not a finite number in " +
                          count_of(watch.since_best, "evaluation") + stopping);
    return event;
  }
  event.lines.push_back(
      "early stop: " + metric + " has not improved on " +
      metric_value_text(metric, watch.best).substr(metric.size() + 1) + " (update " +
      std::to_string(watch.best_step) + ") " +
      (min_delta > 0 ? "by more than " + format_significant(min_delta) + " " : "") + "in " +
      count_of(patience, "evaluation") + stopping);
  return event;
}

std::string best_weights_line(const MetricWatch& best, const std::string& metric,
                              const std::string& path) {
  if (!best.seen)
    return "--keep-best: no evaluation gave a finite " + metric + "; " + path + " not written";
  return "best " + metric_value_text(metric, best.best) + " at update " +
         std::to_string(best.best_step) + ": " + path;
}

RunEvent target_reached_event(const TrainingProgress& at, const StopTarget& target,
                              const std::string& metric, double value, double epochs) {
  RunEvent event{{{"event", "target_reached"},
                  {"step", at.step},
                  {"epoch", epochs},
                  {"samples_seen", at.samples_seen},
                  {"tokens_seen", at.items_seen},
                  {"train_seconds", at.train_seconds},
                  {"metric", metric},
                  {"value", value},
                  {"target", target.value},
                  {"condition", target.to_string()}},
                 {}};
  if (target.metric == "accuracy")
    event.record["accuracy"] = value;  // the field's name before --target generalised it
  const bool percent = target.metric == "accuracy";
  const std::string shown =
      percent ? format_significant(100 * value) + "%" : format_significant(value);
  const std::string goal =
      percent ? format_significant(100 * target.value) + "%" : format_significant(target.value);
  event.lines.push_back("target reached: " + metric + " " + shown +
                        (target.at_least ? " >= " : " <= ") + goal + " after " +
                        count_of(at.step, "update") + ", " + count_of(at.samples_seen, "sample") +
                        ", " + human_duration(at.train_seconds) + " of training; stopping");
  return event;
}

RunEvent diverged_event(const Divergence& d) {
  // Said in the metrics too, so a sweep's summary can tell a diverged cell from a stopped one.
  return {{{"event", "diverged"},
           {"step", d.step},
           {"samples_seen", d.samples_seen},
           {"bad_updates_in_a_row", d.bad_in_a_row},
           {"checkpoint_step", d.resume_step}},
          {}};
}

Error divergence_error(const Divergence& d) {
  const int64_t first_bad = d.step - d.bad_in_a_row + 1;
  // What helps, in this run's numbers: the rate that diverged and how it was reached.
  const LrSchedule& schedule = *d.schedule;
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
  if (!d.clipping)
    fix += "; clip gradients (--clip-norm 1)";
  fix += ". Then 'bigbatch train --resume " + d.run_dir + " --lr " + format_significant(lower) +
         "' continues from update " + std::to_string(d.resume_step) +
         (d.kept ? "" : " (whose loss had already risen: a new run is the safer fix)");
  const std::string what =
      std::to_string(d.bad_in_a_row) + " updates in a row were skipped (" +
      std::to_string(first_bad) + " to " + std::to_string(d.step) + ": " +
      (d.spike_factor > 0 ? "a non-finite loss or gradient, or a loss over " +
                                format_significant(d.spike_factor) + "x the recent median"
                          : std::string("a non-finite loss or gradient")) +
      "); " +
      (d.kept ? "the newest checkpoint, at update " + std::to_string(d.resume_step) +
                    ", is from before them and is kept"
              : std::string(d.had_checkpoint ? "the newest checkpoint holds weights whose loss "
                                               "had already risen"
                                             : "no checkpoint came before them") +
                    ", so the weights before update " + std::to_string(first_bad) +
                    " (untouched by the skipped ones) are checkpointed");
  return Error(ErrorKind::Diverged, what, fix);
}

}  // namespace bigbatch
