#include "commands/lr_find_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "dist/environment.h"
#include "report/lr_range.h"
#include "report/run_records.h"
#include "report/svg_chart.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace bigbatch {

namespace {

// The flags the test sets itself: one given is refused rather than silently replaced.
void check_owned_flags(const TrainConfig& config, const LrFindOptions& options) {
  const TrainConfig defaults;
  const std::string hint =
      "the range test sets the rate itself: give its range with --lr-min "
      "and --lr-max, and its length with --updates";
  auto refuse_if = [&](bool set, const std::string& flag) {
    const bool named = std::find(options.given.begin(), options.given.end(), flag.substr(2)) !=
                       options.given.end();
    check_config(!set && !named, "bigbatch lr-find does not take " + flag, hint);
  };
  refuse_if(config.lr.has_value(), "--lr");
  refuse_if(config.lr_ref_batch.has_value(), "--lr-ref-batch");
  refuse_if(config.lr_scaling != defaults.lr_scaling, "--lr-scaling");
  refuse_if(config.warmup.to_string() != defaults.warmup.to_string(), "--warmup");
  refuse_if(config.schedule != defaults.schedule, "--schedule");
  refuse_if(config.schedule_length.has_value(), "--schedule-length");
  refuse_if(config.max_updates.has_value(), "--max-updates");
  refuse_if(config.min_lr_factor != defaults.min_lr_factor, "--min-lr-factor");
  refuse_if(config.adam_sqrt_adjust.value_or(false), "--adam-sqrt-adjust");
  check_config(config.resume.empty(), "bigbatch lr-find starts a run of its own; it resumes none",
               "drop --resume");
  check_config(!config.global_batch_auto && config.global_batch_schedule.empty(),
               "bigbatch lr-find tests one global batch; a growing batch has a rate per batch",
               "give the batch to test with --global-batch N");
  check_config(std::isfinite(options.lr_min) && std::isfinite(options.lr_max) &&
                   options.lr_min > 0 && options.lr_min < options.lr_max,
               "--lr-min and --lr-max must be positive with --lr-min below --lr-max, got " +
                   format_significant(options.lr_min) + " and " +
                   format_significant(options.lr_max),
               "e.g. --lr-min 1e-6 --lr-max 1");
  check_config(options.updates >= int64_t(kMinLrRangePoints) && options.updates <= 100000,
               "--updates must be from " + std::to_string(kMinLrRangePoints) + " to 100000, got " +
                   std::to_string(options.updates),
               "e.g. --updates 100");
  const auto launched = read_dist_environment(process_environment);
  check_config(!launched || launched->world_size == 1,
               "bigbatch lr-find runs in one process (this is rank " +
                   std::to_string(launched ? launched->rank : 0) + " of " +
                   std::to_string(launched ? launched->world_size : 1) + ")",
               "run it without a launcher: one process with the same global batch accumulates "
               "the same mean gradient, so the curve is the same");
}

std::string chart_page(const LrRangeReading& reading, const std::vector<LrRangePoint>& raw,
                       const std::string& title) {
  LineChart chart;
  chart.title = "training loss against the learning rate";
  chart.x_label = "learning rate";
  chart.y_label = "loss";
  chart.log_x = true;
  // Past divergence the loss dwarfs the curve: the measured points shown stop at 1.5x the
  // highest smoothed loss before it.
  double ceiling = 0;
  for (size_t i = 0; i < reading.end; ++i)
    ceiling = std::max(ceiling, 1.5 * reading.smoothed[i].loss);
  ChartSeries measured{"loss", chart_colour(0), {}};
  for (const LrRangePoint& p : raw) {
    if (p.loss <= ceiling)
      measured.points.push_back({p.lr, p.loss});
  }
  ChartSeries smooth{"smoothed", chart_colour(1), {}};
  for (size_t i = 0; i < reading.end; ++i)
    smooth.points.push_back({reading.smoothed[i].lr, reading.smoothed[i].loss});
  chart.series = {measured, smooth};
  if (reading.fell_clearly)
    chart.x_markers.push_back(
        {reading.suggested_lr, "suggested " + chart_number(reading.suggested_lr)});
  chart.x_markers.push_back({reading.smoothed[reading.lowest].lr, "lowest loss"});
  std::string page = html_page_start(title) + "<h1>" + xml_escape(title) + "</h1>\n" +
                     render_svg(chart) + "\n</body></html>\n";
  return page;
}

}  // namespace

LrFindReport run_lr_find(const TrainConfig& given, const LrFindOptions& options,
                         const CustomProblem* problem) {
  // The configuration is validated once, by the training run's session.
  check_owned_flags(given, options);
  TrainConfig config = given;
  config.lr = options.lr_max;  // taken as tuned at the run's own batch: nothing is scaled
  config.lr_scaling = LrScaling::None;
  config.schedule = ScheduleKind::RangeTest;
  config.min_lr_factor = options.lr_min / options.lr_max;
  config.max_updates = options.updates;
  // The noise scale under a rate swept over six decades judges no batch: not measured, and no
  // verdict on it printed.
  config.noise_scale = false;
  // Every epoch has an update, so --updates ends the run; a given --epochs is the training's,
  // carried into the train command printed at the end.
  config.epochs = options.updates;
  if (config.out.empty())
    config.out = default_run_directory("lr-find-");

  LrFindReport report;
  report.run_dir = config.out;
  bool diverged_run = false;
  try {
    run_training(config, problem);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Diverged)
      throw;
    diverged_run = true;  // the guard stopped it: the curve so far is the test's
  }

  const RunRecords records = read_run_records(config.out + "/metrics.jsonl");
  std::vector<LrRangePoint> points;
  for (const nlohmann::json& update : records.updates) {
    if (update.contains("lr") && update.contains("loss") && update["loss"].is_number())
      points.push_back({update["lr"].get<double>(), update["loss"].get<double>()});
  }
  const LrRangeReading reading = read_lr_range(points);
  const nlohmann::json& first = records.updates.front();
  const int64_t global_batch = first.value("global_batch", int64_t{0});
  const int64_t micro_batch = first.value("micro_batch", int64_t{0});
  // Where it diverged: the smoothed loss's stop, or where the guard stopped the run (its
  // skipped updates' losses rise too fast for the average to reach 4x before it).
  const bool diverged = reading.diverged || diverged_run;
  const double diverged_lr = reading.diverged ? reading.smoothed[reading.end].lr
                             : diverged_run   ? points.back().lr
                                              : 0.0;

  // A curve that did not clearly fall is no reading: its rates are null, not numbers to use.
  const auto suggested = [&](double lr) {
    return reading.fell_clearly ? nlohmann::json(lr) : nlohmann::json(nullptr);
  };
  nlohmann::json points_json = nlohmann::json::array();
  for (size_t i = 0; i < reading.smoothed.size(); ++i)
    points_json.push_back(
        {{"lr", reading.smoothed[i].lr}, {"smoothed_loss", reading.smoothed[i].loss}});
  const nlohmann::json json = {
      {"global_batch", global_batch},
      {"micro_batch", micro_batch},
      {"lr_min", options.lr_min},
      {"lr_max", options.lr_max},
      {"updates", points.size()},
      {"suggested_lr", suggested(reading.suggested_lr)},
      {"rule", "steepest descent of the smoothed loss against log(lr)"},
      {"lowest_loss_lr", reading.smoothed[reading.lowest].lr},
      {"lowest_loss_lr_over_10", suggested(reading.lowest_lr_over_10)},
      {"start_loss", reading.start_loss},
      {"lowest_loss", reading.smoothed[reading.lowest].loss},
      {"fall", reading.fall},
      {"fell_clearly", reading.fell_clearly},
      {"diverged", diverged},
      {"diverged_lr", diverged ? nlohmann::json(diverged_lr) : nlohmann::json(nullptr)},
      {"smoothed", points_json}};
  report.json = json.dump(2);
  atomic_write_file(config.out + "/lr_find.json", report.json + "\n", Links::Replace);
  const std::string title = "lr-find: " + std::to_string(points.size()) +
                            " updates at global batch " + std::to_string(global_batch);
  atomic_write_file(config.out + "/lr_find.html", chart_page(reading, points, title),
                    Links::Replace);

  const std::string given_flags =
      flags_set_in(given, {"out", "progress"});  // the test's own run directory
  const std::string heading = "lr-find: " + std::to_string(points.size()) +
                              " updates at global batch " + std::to_string(global_batch) +
                              " (micro-batch " + std::to_string(micro_batch) +
                              "), the rate rising from " + format_significant(options.lr_min) +
                              " to " + format_significant(options.lr_max) + "\n";
  const std::string divergence = diverged
                                     ? "; it diverged past " + format_significant(diverged_lr, 3)
                                     : std::string("; it did not diverge below --lr-max");
  const std::string chart_line = "report: " + config.out + "/lr_find.html\n";
  if (!reading.fell_clearly) {
    report.text =
        heading + "the smoothed loss fell only " + format_significant(100 * reading.fall, 2) +
        "% (from " + format_significant(reading.start_loss, 4) + " to " +
        format_significant(reading.smoothed[reading.lowest].loss, 4) + ", lowest at lr " +
        format_significant(reading.smoothed[reading.lowest].lr, 3) + ")" + divergence +
        "\nno rate suggested: a curve that falls less than " +
        format_significant(100 * kClearFall, 2) +
        "% has no steepest descent to read, only noise; run longer (--updates " +
        std::to_string(std::max<int64_t>(2 * options.updates, 200)) +
        "), widen the range (--lr-min " + format_significant(options.lr_min / 100, 2) +
        " --lr-max " + format_significant(options.lr_max * 10, 2) +
        "), or check that the model learns at all (its inputs, targets and loss)\n" + chart_line;
    return report;
  }
  report.text = heading + "the smoothed loss fell fastest at lr " +
                format_significant(reading.suggested_lr, 3) + " and was lowest at " +
                format_significant(reading.smoothed[reading.lowest].lr, 3) + divergence +
                "\nsuggested: --lr " + format_significant(reading.suggested_lr, 2) +
                " (the steepest descent, as Lightning's lr_find; fastai's lowest-loss rate / 10: " +
                format_significant(reading.lowest_lr_over_10, 2) +
                ")\ntrain with it: bigbatch train" + given_flags + " --lr " +
                format_significant(reading.suggested_lr, 2) +
                " (taken as tuned at this global batch; add --lr-ref-batch " +
                std::to_string(global_batch) + " to scale it to another)\n" + chart_line;
  return report;
}

}  // namespace bigbatch
