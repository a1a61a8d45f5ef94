#include "train/run_resume.h"

#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_paths.h"
#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "io/safetensors.h"
#include "train/run_directory.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// A resume that changes the run's length (--epochs, --max-updates) re-plans the learning-rate
// schedule over the new length, so the rate jumps where the old plan had decayed: said at the
// start, against the plan in the run's config.toml (before it is rewritten).
void say_replanned_schedule(const TrainingRun& r, Console& console) {
  const std::string path = r.run_dir + "/config.toml";
  if (!r.job.is_main() || !path_exists(path))
    return;
  TrainConfig planned;
  std::unique_ptr<RunSchedule> before;
  try {
    load_toml_config(planned, path);
    planned.complete_older_run();
    const auto length_text = [](const TrainConfig& c) {
      return c.schedule_length ? c.schedule_length->to_string() : std::string();
    };
    if (planned.epochs == r.config.epochs && planned.max_updates == r.config.max_updates &&
        length_text(planned) == length_text(r.config))
      return;
    before = make_run_schedule(resolve_run(planned, r.data.train.size(), r.job.world_size,
                                           items_per_sample(r.data.train)));
  } catch (const Error&) {
    return;  // a plan that no longer resolves has nothing to compare
  }
  const LrScheduleConfig& was = before->lr_schedule().config();
  const LrScheduleConfig& now = r.state.schedule->lr_schedule().config();
  if (was.total_updates == now.total_updates)
    return;
  before->restore(r.state.at);
  const double rate_was = before->rate(r.state.at, {}).lr;
  const double rate_now = r.state.schedule->rate(r.state.at, {}).lr;
  // Only a decay has an end to keep (a step schedule's milestones are intervals of their own).
  const bool decays = was.kind == ScheduleKind::Cosine || was.kind == ScheduleKind::Linear;
  const double end_rate = before->lr_schedule().lr_at(was.total_updates);
  std::vector<std::string> changes;
  if (planned.epochs != r.config.epochs)
    changes.push_back(std::to_string(planned.epochs) + " -> " + std::to_string(r.config.epochs) +
                      " epochs");
  if (planned.max_updates != r.config.max_updates)
    changes.push_back("--max-updates changed");
  console.say(
      (changes.empty() ? std::string("--schedule-length changed")
                       : "the run's length changed (" + join(changes, ", ") + ")") +
      ": its " + to_string(now.kind) + " schedule is re-planned over " +
      count_of(now.total_updates, "update") + " where the run planned " +
      count_of(was.total_updates, "update") + ", so update " + std::to_string(r.state.at.step + 1) +
      " trains at " + format_significant(rate_now, 4) + " where the plan had " +
      format_significant(rate_was, 4) +
      (r.state.at.step > 0 && decays ? "; to keep the planned schedule, add --schedule-length " +
                                           std::to_string(was.total_updates) +
                                           "u (past its end the rate holds its final value, " +
                                           format_significant(end_rate, 4) +
                                           (end_rate > 0 ? ")" : ": those updates would not train)")
                                     : std::string()));
}

// The step and metric a best-weights file records (step -1: unreadable).
std::pair<int64_t, std::string> best_file_record(const std::string& path) {
  std::map<std::string, std::string> metadata;
  try {
    load_safetensors(path, &metadata);
  } catch (const Error&) {
    return {-1, ""};
  }
  return {parse_int(metadata["step"]).value_or(-1), metadata["best_metric"]};
}

}  // namespace

void restart_watches_of_other_metrics(TrainingRun& r, Console& console) {
  const bool has_validation = r.data.validation.size() > 0;
  const std::pair<std::optional<WatchedMetric>, MetricWatch*> watches[] = {
      {r.config.early_stop_metric(), &r.state.at.early_stop},
      {r.config.keep_best_metric(), &r.state.at.keep_best}};
  for (const auto& [watched, watch] : watches) {
    if (!watched || watch->counted_step < 0 || watch->metric == watched->metric_in(has_validation))
      continue;
    console.say(std::string(watch == &r.state.at.early_stop ? "--early-stop" : "--keep-best") +
                " now watches " + watched->metric_in(has_validation) +
                " where the checkpoint counted " + watch->metric + ": its count starts again here");
    *watch = MetricWatch{};
  }
}

void restore_best_weights(TrainingRun& r, Console& console) {
  if (!r.config.keep_best_metric())
    return;
  const std::string path = r.run_dir + "/best.safetensors";
  MetricWatch& watch = r.state.at.keep_best;
  const auto matches = [&](const std::string& file) {
    if (!watch.seen || !path_exists(file))
      return false;
    const auto [step, metric] = best_file_record(file);
    return step == watch.best_step && metric == watch.metric;
  };
  if (matches(path) || (!watch.seen && !path_exists(path)))
    return;
  std::string saved;
  try {
    saved = find_latest_checkpoint(r.config.resume) + "/best.safetensors";
  } catch (const Error&) {
  }
  std::error_code ignored;
  if (!saved.empty() && matches(saved)) {
    atomic_write_file(path, read_text_file(saved), Links::Replace);
    console.say("restored " + path + " (update " + std::to_string(watch.best_step) +
                ", the best the checkpoint knew of) from the checkpoint");
    return;
  }
  const bool had_file = path_exists(path);
  const std::string file_metric = had_file ? best_file_record(path).second : std::string();
  std::filesystem::remove(path, ignored);
  const std::string watched = r.config.keep_best_metric()->metric_in(r.data.validation.size() > 0);
  if (watch.seen) {
    console.say("--keep-best: the best " + watch.metric + " the checkpoint knew of (update " +
                std::to_string(watch.best_step) +
                ") has no weights kept with it; the best is looked for again from here");
  } else if (had_file && file_metric != watched) {
    console.say("removed " + path + ": it holds the best " +
                (file_metric.empty() ? std::string("of nothing it names") : file_metric) +
                ", and --keep-best watches " + watched);
  } else if (had_file) {
    console.say("removed " + path + ": it is from past the checkpoint this run resumes (update " +
                std::to_string(r.state.at.step) + ")");
  }
  watch = MetricWatch{};
}

void abandon_newer_history(TrainingRun& r, Console& console, bool move) {
  const std::vector<std::string> newer = newer_checkpoints(r.config.resume);
  if (newer.empty())
    return;
  const std::string newest = std::filesystem::path(newer.back()).filename().string();
  const std::string chosen = std::filesystem::path(r.config.resume).filename().string();
  if (!r.config.discard_newer) {
    throw Error(ErrorKind::Format,
                "checkpoint '" + r.config.resume + "' is older than " +
                    std::to_string(newer.size()) + " other checkpoint(s) of its run (the newest " +
                    newest + "): resuming from it would mix two histories",
                "add --discard-newer to move them to " + r.run_dir +
                    "/abandoned/ and continue from " + chosen +
                    ", or resume the run directory to continue from " + newest);
  }
  r.abandons_newer = true;
  if (!move || !r.job.is_main())
    return;
  const std::string aside =
      set_checkpoints_aside(r.run_dir, newer, "after-" + chosen + "-" + default_run_timestamp());
  console.say("moved " + std::to_string(newer.size()) + " newer checkpoint(s), up to " + newest +
              ", to " + aside + ": the run continues from " + chosen + " as a new history");
}

void resume_from_checkpoint(TrainingRun& r, PartialWindow& partial, Console& console) {
  const TrainConfig& config = r.config;
  RunSchedule& schedule = *r.state.schedule;
  TrainingProgress& at = r.state.at;
  if (r.shards) {
    // The checkpoint holds the whole state (whatever sharding wrote it): read whole, then cut.
    auto whole = r.shards->make_whole_optimizer();
    at = read_checkpoint(config.resume, r.identity, *r.model, *whole, &partial);
    r.shards->adopt_whole(*whole);
  } else {
    at = read_checkpoint(config.resume, r.identity, *r.model, *r.optimizer, &partial);
  }
  if (schedule.restore(at))
    prepare_for_training(r.model, config, schedule.plan().accumulation_steps);
  console.say("resumed from " + config.resume + " at update " + std::to_string(at.step) +
              " (epoch " + std::to_string(at.epoch + 1) + ", " + std::to_string(at.samples_seen) +
              " samples seen); batch plan " + schedule.plan().describe());
  const bool resumed_inside_window = at.micro_step > 0;
  if (at.micro_step > 0 && (partial.micro_batch_size != schedule.plan().micro_batch_size ||
                            partial.world_size != r.job.world_size ||
                            partial.micro_batch_tokens != config.micro_batch_tokens)) {
    // The partial gradient belongs to another cut of the window: redo the window instead, on
    // the same samples, so the mathematics is unchanged.
    console.say("the checkpoint is " + std::to_string(at.micro_step) + " micro-steps into update " +
                std::to_string(at.step + 1) + " under micro " +
                std::to_string(partial.micro_batch_size) + " x world " +
                std::to_string(partial.world_size) +
                "; that window is replayed from its start with the new plan");
    at.micro_step = 0;
  }
  if (at.position_in_epoch < 0)  // a checkpoint from before positions were saved
    at.position_in_epoch = at.update_in_epoch * schedule.plan().global_batch_size;
  if (at.position_in_epoch > r.data.train.size()) {
    throw Error(ErrorKind::Format,
                "checkpoint '" + config.resume + "' is at sample " +
                    std::to_string(at.position_in_epoch) + " of an epoch of " +
                    std::to_string(r.data.train.size()),
                "resume with the dataset and --train-subset the run was started with");
  }
  if (const std::string wrong = schedule.inconsistency(at); !wrong.empty()) {
    throw Error(ErrorKind::Format, "checkpoint '" + config.resume + "' has " + wrong,
                "state.json was edited or damaged: resume from an earlier checkpoint");
  }
  const bool nothing_left = at.micro_step == 0 && schedule.complete(at);
  // The run's final weights belong to its newest history: with newer checkpoints abandoned,
  // they are not this resume's.
  if (nothing_left && !r.abandons_newer && path_exists(r.run_dir + "/weights.safetensors")) {
    r.finished = true;  // a finished run is reported, not rewritten (issue 20)
    return;
  }
  abandon_newer_history(r, console, /*move=*/true);
  say_replanned_schedule(r, console);
  if (r.job.is_main()) {
    r.write_description();
    // Lines the interrupted run wrote after its checkpoint are replayed now: drop them.
    if (keep_metrics_of_checkpoint(r.run_dir + "/metrics.jsonl", at) && resumed_inside_window)
      r.state.update_already_logged = at.step + 1;
  }
}

}  // namespace bigbatch
