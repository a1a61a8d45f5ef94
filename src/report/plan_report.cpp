#include "report/plan_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/text.h"

namespace bigbatch {

namespace {

// "warning: TEXT" broken between words at kPlanWidth columns, continued under the text: the plan
// is a table to read, in a terminal or plan.txt, and a warning of several hundred characters
// wrapped by the terminal breaks its words.
constexpr size_t kPlanWidth = 100;
std::string wrapped_warning(const std::string& text) {
  const std::string first = "warning: ";
  const std::string indent(first.size(), ' ');
  std::string out = first;
  size_t column = first.size();
  bool line_empty = true;
  for (const std::string& word : split(text, ' ')) {
    if (word.empty())
      continue;
    if (!line_empty && column + 1 + word.size() > kPlanWidth) {
      out += "\n" + indent;
      column = indent.size();
      line_empty = true;
    }
    if (!line_empty) {
      out += " ";
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
  }
  return out + "\n";
}
std::string derived_note(const BatchPlan& plan, const char* field) {
  return plan.derived == field ? "   (derived)" : "";
}

std::string line(const std::string& label, const std::string& value, const std::string& note = {}) {
  // Any length: a value is never cut (a fixed buffer once cut the automatic batch's long line).
  std::string text = "  " + label;
  text.append(label.size() < 28 ? 28 - label.size() : 0, ' ');
  return text + " " + value + note + "\n";
}

// ", beta1 0.8, beta2 0.998, eps 7.07107e-09" at `global_batch` under --adam-sqrt-adjust, or empty.
std::string adam_at(const ResolvedRun& run, int64_t global_batch) {
  const auto adam = run.schedule.adam_at(global_batch);
  return adam ? ", " + describe(*adam) : std::string();
}

// The share of the computed positions that are padding.
std::string padding_percent(const TokenCutEpoch& cut) {
  return cut.padded_tokens > 0
             ? format_fixed(
                   100.0 * double(cut.padded_tokens - cut.tokens) / double(cut.padded_tokens), 0) +
                   "%"
             : std::string("0%");
}
}  // namespace

std::string describe_token_cut(const ResolvedRun& run) {
  const BatchPlan& p = run.plan;
  std::string text = "global batch " + std::to_string(p.global_batch_size) + " x world " +
                     std::to_string(p.world_size) +
                     ", each window cut into micro-batches of at most " +
                     std::to_string(run.micro_batch_tokens) + " padded tokens";
  if (const auto& cut = run.token_cut) {
    text += ": " + std::to_string(cut->micro_steps) + " micro-steps in epoch 1 (" +
            std::to_string(cut->fewest_per_window) +
            (cut->most_per_window == cut->fewest_per_window
                 ? ""
                 : " to " + std::to_string(cut->most_per_window)) +
            " per window), " + padding_percent(*cut) + " padding";
  }
  return text;
}

std::string format_plan_text(const ResolvedRun& run) {
  const BatchPlan& p = run.plan;
  const EpochPlan& e = run.epoch;
  const bool by_tokens = run.micro_batch_tokens > 0;
  std::string out = "batch plan\n";
  out += line("global batch (effective)", std::to_string(p.global_batch_size),
              derived_note(p, "global_batch_size"));
  if (by_tokens) {
    // The rank's whole share is the nominal micro-batch: what runs is cut inside each window.
    out += line("micro batch", "at most " + std::to_string(run.micro_batch_tokens) +
                                   " padded tokens (rows x longest), cut inside each window");
    out +=
        line("accumulation steps",
             run.token_cut ? std::to_string(run.token_cut->fewest_per_window) +
                                 (run.token_cut->most_per_window == run.token_cut->fewest_per_window
                                      ? ""
                                      : " to " + std::to_string(run.token_cut->most_per_window)) +
                                 " per window (epoch 1, by tokens)"
                           : std::string("as the window's lengths cut it (by tokens)"));
  } else {
    out += line("micro batch", std::to_string(p.micro_batch_size),
                derived_note(p, "micro_batch_size"));
    out += line("accumulation steps", std::to_string(p.accumulation_steps),
                derived_note(p, "accumulation_steps"));
  }
  out += line("world size (ranks)", std::to_string(p.world_size));
  if (!by_tokens && p.has_uneven_micro_batches()) {
    out += line("last micro-batch per window", std::to_string(p.last_micro_batch_size()),
                "   (weighted by its true size)");
  }
  out += "per epoch of " + std::to_string(e.dataset_size) + " samples\n";
  if (!by_tokens) {
    out += line("micro-steps (fwd/bwd passes)", std::to_string(e.micro_steps_per_epoch),
                "   per rank");
  } else if (run.token_cut) {
    out += line("micro-steps (fwd/bwd passes)", std::to_string(run.token_cut->micro_steps),
                "   on rank 0 in epoch 1 (" + padding_percent(*run.token_cut) +
                    " of the positions padding; each epoch's order cuts its own)");
  } else {
    out += line("micro-steps (fwd/bwd passes)", "as the windows' lengths cut them (by tokens)");
  }
  out += line("updates", std::to_string(e.updates_per_epoch));
  out += line("samples per update", std::to_string(p.global_batch_size));
  if (e.items_per_sample > 0) {
    out += line("tokens per update",
                "~" + human_count(e.items_per_sample * double(p.global_batch_size)),
                "   (" + format_significant(e.items_per_sample, 4) + " target tokens per sample)");
  }
  if (e.last_window_size > 0) {
    out += line("last window",
                std::to_string(e.last_window_size) + " samples (kept, weighted by its true size)");
  } else if (e.dropped_samples > 0) {
    out += line("last window", std::to_string(e.dropped_samples) + " samples dropped");
  }
  // The seed's comparison: the same effective batch as one direct pass, and no accumulation.
  const int64_t direct_passes = e.updates_per_epoch;
  const int64_t per_rank_micro_updates =
      (e.samples_per_epoch + p.micro_batch_size * p.world_size - 1) /
      (p.micro_batch_size * p.world_size);
  out += "compared with\n";
  out += line("one direct batch",
              std::to_string(direct_passes) + " passes per epoch (needs memory for " +
                  std::to_string(p.global_batch_size / p.world_size) + " samples per rank)");
  if (!by_tokens) {
    out += line("no accumulation", std::to_string(per_rank_micro_updates) + " updates of " +
                                       std::to_string(p.micro_batch_size * p.world_size) +
                                       " samples per epoch");
  }
  if (run.auto_batch) {
    const GrowthRule& rule = *run.auto_batch;
    out += "global batch auto\n";
    out += line("starts at",
                "global " + p.describe() + ", lr " +
                    format_significant(run.schedule.config().base_lr *
                                       scale_lr(1.0, run.ramp->reference_batch, p.global_batch_size,
                                                run.schedule.config().scaling)));
    out += line("doubles", "while the predicted goodput gain is at least " +
                               format_significant(100 * rule.threshold, 3) + "% (at the noise " +
                               (rule.predict_at == GrowthPrediction::BandLow
                                    ? "scale's low end"
                                    : "scale's estimate, --growth-predict-at estimate") +
                               "; noise scale and update cost measured in training), "
                               "accumulation doubling, the micro-batch staying");
    out +=
        line("tested",
             rule.branch_test
                 ? "by branching: the next samples at both batches, scored on " +
                       std::to_string(rule.holdout) +
                       " training samples set aside (--growth-test branch), the losing "
                       "branches at most " +
                       format_significant(100 * rule.test_budget, 3) + "% of the samples trained" +
                       (rule.control == GrowthControl::Temperature
                            ? ", compared with the current batch at the doubled one's noise "
                              "temperature (--growth-control temperature)"
                            : std::string())
                 : "no: the prediction alone decides (--growth-test none)");
    out +=
        line("at most",
             "global " + std::to_string(rule.max_global_batch) +
                 (run.auto_batch_limit_note.empty() ? std::string()
                                                    : " (" + run.auto_batch_limit_note + ")") +
                 ", peak lr " +
                 format_significant(run.schedule.config().base_lr *
                                    scale_lr(1.0, run.ramp->reference_batch, rule.max_global_batch,
                                             run.schedule.config().scaling)) +
                 adam_at(run, rule.max_global_batch));
  } else if (run.ramp) {
    out += "global batch schedule (" + run.ramp->batches.to_string() + ")\n";
    for (const auto& phase : run.ramp->phases) {
      const BatchPlan step =
          plan_for_ramp_step(phase.global_batch, p.micro_batch_size, p.world_size);
      char label[64];
      std::snprintf(label, sizeof label, "from update %lld",
                    static_cast<long long>(phase.first_update + 1));
      out += line(
          label, "global " + step.describe() + ": " + count_of(phase.updates, "update") + ", " +
                     count_of(phase.samples, "sample") + ", peak lr " +
                     format_significant(run.schedule.config().base_lr *
                                        scale_lr(1.0, run.ramp->reference_batch, phase.global_batch,
                                                 run.schedule.config().scaling)) +
                     adam_at(run, phase.global_batch));
    }
  }
  out += "learning rate\n";
  if (run.ramp) {
    out +=
        line("rule", "lr " + format_double(run.schedule.config().base_lr) + " @ " +
                         std::to_string(run.ramp->reference_batch) + ", " +
                         to_string(run.schedule.config().scaling) + " with the batch at each step");
  } else {
    out += line("rule", run.schedule.describe_scaling());
  }
  if (run.adam) {
    out += line(
        "adam (sqrt rule)",
        describe(*run.adam) +
            (run.ramp ? " at the start; at each batch its own (beta_i -> 1 - k (1 - beta_i), "
                        "eps -> eps / sqrt(k), k = batch / " +
                            std::to_string(run.ramp->reference_batch) + ")"
                      : std::string()) +
            (run.auto_batch ? "; --no-adam-sqrt-adjust keeps them at every batch" : std::string()));
  }
  if (run.adascale) {
    const auto& a = *run.adascale;
    out += line("warmup",
                std::to_string(run.schedule.config().warmup_updates) + " scale-invariant updates");
    out += line("schedule", std::string(to_string(run.schedule.config().kind)) + " over " +
                                std::to_string(a.scale_invariant_total) +
                                " scale-invariant updates (" + std::to_string(a.reference_batch) +
                                " samples each)");
    out += line("run length", "the gain decides: " +
                                  std::to_string(static_cast<int64_t>(std::ceil(
                                      double(a.scale_invariant_total) / std::max(1.0, a.scale)))) +
                                  " updates (gain " + format_significant(a.scale) + ") to " +
                                  std::to_string(run.total_updates) + " (gain 1)");
  } else if (run.ramp) {
    const std::string unit = " updates of " + std::to_string(run.ramp->reference_batch) +
                             " samples (the schedule counts samples)";
    out += line("warmup", std::to_string(run.schedule.config().warmup_updates) + unit);
    out += line("schedule", std::string(to_string(run.schedule.config().kind)) + " over " +
                                std::to_string(run.schedule.config().total_updates) + unit);
    out += line("run length", (run.auto_batch ? "at most " : "") +
                                  count_of(run.total_updates, "update") + ", " +
                                  std::to_string(run.ramp->total_samples) + " samples (" +
                                  std::to_string(run.epochs) + " epochs)" +
                                  (run.auto_batch ? "; fewer updates as the batch grows" : ""));
  } else {
    out += line("warmup", count_of(run.schedule.config().warmup_updates, "update"));
    const int64_t schedule_updates = run.schedule.config().total_updates;
    out += line("schedule", std::string(to_string(run.schedule.config().kind)) + " over " +
                                std::to_string(schedule_updates) + " updates (" +
                                (schedule_updates == run.total_updates
                                     ? std::to_string(run.epochs) + " epochs)"
                                     : "--schedule-length; the run trains " +
                                           std::to_string(run.total_updates) + " updates, " +
                                           std::to_string(run.epochs) + " epochs)"));
  }
  for (const auto& w : e.warnings)
    out += wrapped_warning(w);
  for (const auto& w : run.schedule.warnings())
    out += wrapped_warning(w);
  return out;
}

nlohmann::json plan_json(const ResolvedRun& run) {
  const BatchPlan& p = run.plan;
  const EpochPlan& e = run.epoch;
  nlohmann::json j;
  j["global_batch_size"] = p.global_batch_size;
  j["micro_batch_size"] = p.micro_batch_size;
  j["accumulation_steps"] = p.accumulation_steps;
  j["last_micro_batch_size"] = p.last_micro_batch_size();
  j["world_size"] = p.world_size;
  j["derived"] = p.derived;
  j["dataset_size"] = e.dataset_size;
  j["micro_steps_per_epoch"] = run.token_cut ? run.token_cut->micro_steps : e.micro_steps_per_epoch;
  if (run.micro_batch_tokens > 0) {
    j["micro_batch_tokens"] = run.micro_batch_tokens;  // micro_batch_size is the rank's share
    if (run.token_cut) {
      j["micro_steps_per_window"] = {run.token_cut->fewest_per_window,
                                     run.token_cut->most_per_window};
      j["padded_tokens_epoch_1"] = run.token_cut->padded_tokens;
      j["tokens_epoch_1"] = run.token_cut->tokens;
    }
  }
  j["updates_per_epoch"] = e.updates_per_epoch;
  j["samples_per_update"] = p.global_batch_size;
  if (e.items_per_sample > 0) {
    j["tokens_per_sample"] = e.items_per_sample;
    j["tokens_per_update"] = e.items_per_sample * double(p.global_batch_size);
  }
  j["last_window"] = to_string(e.last_window);
  j["last_window_size"] = e.last_window_size;
  j["dropped_samples"] = e.dropped_samples;
  j["direct_batch_passes_per_epoch"] = e.updates_per_epoch;
  j["lr"] = run.schedule.peak_lr();
  j["base_lr"] = run.schedule.config().base_lr;
  j["lr_ref_batch"] = run.schedule.config().reference_batch;
  j["lr_scaling"] = to_string(run.schedule.config().scaling);
  if (run.adam) {
    j["adam_beta1"] = run.adam->beta1;
    j["adam_beta2"] = run.adam->beta2;
    j["adam_eps"] = run.adam->eps;
  }
  j["warmup_updates"] = run.schedule.config().warmup_updates;
  j["schedule"] = to_string(run.schedule.config().kind);
  j["total_updates"] = run.total_updates;
  j["epochs"] = run.epochs;
  if (run.auto_batch) {
    j["global_batch_auto"] = true;
    j["max_global_batch"] = run.auto_batch->max_global_batch;
    if (!run.auto_batch_limit_note.empty())
      j["max_global_batch_reason"] = run.auto_batch_limit_note;
    j["growth_test"] = run.auto_batch->branch_test ? "branch" : "none";
    if (run.auto_batch->branch_test)
      j["growth_control"] = growth_control_names().name(run.auto_batch->control);
    j["growth_holdout"] = run.auto_batch->holdout;
    if (run.auto_batch->branch_test)
      j["growth_test_budget"] = run.auto_batch->test_budget;
    j["growth_threshold"] = run.auto_batch->threshold;
    j["growth_predict_at"] = growth_prediction_names().name(run.auto_batch->predict_at);
    if (run.auto_batch->update_cost)
      j["update_cost"] = *run.auto_batch->update_cost;
  }
  if (run.ramp) {
    j["global_batch_schedule"] = run.ramp->batches.to_string();
    j["lr_ref_batch"] = run.ramp->reference_batch;
    for (const auto& phase : run.ramp->phases) {
      nlohmann::json entry = {
          {"global_batch", phase.global_batch}, {"accumulation_steps", phase.accumulation_steps},
          {"first_update", phase.first_update}, {"updates", phase.updates},
          {"samples", phase.samples},           {"short_windows", phase.short_windows}};
      if (const auto adam = run.schedule.adam_at(phase.global_batch)) {
        entry["adam_beta1"] = adam->beta1;
        entry["adam_beta2"] = adam->beta2;
        entry["adam_eps"] = adam->eps;
      }
      j["ramp_phases"].push_back(entry);
    }
  }
  if (run.adascale) {
    // total_updates and epochs are then upper bounds (a gain of 1 throughout).
    j["adascale_reference_batch"] = run.adascale->reference_batch;
    j["adascale_scale"] = run.adascale->scale;
    j["scale_invariant_updates"] = run.adascale->scale_invariant_total;
  }
  j["warnings"] = e.warnings;
  for (const auto& w : run.schedule.warnings())
    j["warnings"].push_back(w);
  return j;
}

}  // namespace bigbatch
