#include "report/html_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "config/option_table.h"
#include "config/train_config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "report/run_records.h"
#include "report/svg_chart.h"

namespace bigbatch {

namespace {

// A colour-blind-safe palette (Okabe-Ito).
constexpr const char* kBlue = "#0072B2";
constexpr const char* kLightBlue = "#9CC9E6";  // kBlue faded: the raw curve under its smoothing
constexpr const char* kOrange = "#E69F00";
constexpr const char* kGreen = "#009E73";
constexpr const char* kRed = "#D55E00";
constexpr const char* kPurple = "#CC79A7";

constexpr double kMiB = 1024.0 * 1024.0;

std::string section(const std::string& title, const std::string& body) {
  return "<section><h2>" + xml_escape(title) + "</h2>" + body + "</section>\n";
}

std::string optional_file(const std::string& path) {
  return path_exists(path) ? read_text_file(path) : std::string("(not found)");
}

// A language model's records: its items are tokens (update records say tokens_per_s).
bool is_language_model(const RunRecords& r) {
  return std::any_of(r.updates.begin(), r.updates.end(),
                     [](const nlohmann::json& u) { return u.contains("tokens_per_s"); });
}

// A record's text field, "" when it has none (a string read through a pointer-free path: GCC's
// -Wnull-dereference misreads json::value(key, std::string()) once inlined).
std::string text_of(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get_ref<const std::string&>() : std::string();
}

std::string summary(const RunRecords& r) {
  std::string rows;
  auto row = [&](const std::string& name, const std::string& value) {
    rows += "<tr><th>" + xml_escape(name) + "</th><td>" + xml_escape(value) + "</td></tr>";
  };
  const bool tokens = is_language_model(r);
  if (!r.updates.empty()) {
    const auto& last = r.updates.back();
    row("updates", std::to_string(last.value("step", int64_t{0})));
    row("samples seen", std::to_string(last.value("samples_seen", int64_t{0})));
    if (tokens)
      row("tokens seen", human_count(double(last.value("tokens_seen", int64_t{0}))));
    // The plan's global batch, not the last update's (an epoch's short last window is smaller).
    if (last.contains("global_batch"))
      row("global batch (samples per update)",
          std::to_string(last.value("global_batch", int64_t{0})));
    // An epoch's short last window trains fewer samples than the global batch: said beside its
    // count, which would otherwise read as a contradiction of the row above.
    const int64_t before = r.updates.size() > 1
                               ? r.updates[r.updates.size() - 2].value("samples_seen", int64_t{0})
                               : 0;
    const int64_t window = last.value("samples_seen", int64_t{0}) - before;
    const int64_t global = last.value("global_batch", int64_t{0});
    row(tokens ? "target tokens (last update)" : "items (last update)",
        std::to_string(last.value("items", int64_t{0})) +
            (window > 0 && global > 0 && window < global
                 ? " (a short last window of " + std::to_string(window) + " samples)"
                 : std::string()));
    if (last.contains("micro_batch"))
      row("micro-batch (last update)", std::to_string(last.value("micro_batch", int64_t{0})));
  }
  if (!r.epochs.empty()) {
    const auto& last = r.epochs.back();
    if (last.contains("test_accuracy")) {  // absent for language models and own losses
      char accuracy[32];
      std::snprintf(accuracy, sizeof accuracy, "%.2f%%", 100 * last.value("test_accuracy", 0.0));
      row("test accuracy (last epoch)", accuracy);
    }
    if (last.contains("test_loss") && last["test_loss"].is_number())
      row("test loss (last epoch)", format_loss(last["test_loss"].get<double>()));
    if (last.contains("val_accuracy") && last["val_accuracy"].is_number())
      row("validation accuracy (last epoch)",
          format_fixed(100 * last["val_accuracy"].get<double>(), 2) + "%");
    if (last.contains("val_loss") && last["val_loss"].is_number())
      row("validation loss (last epoch)", format_loss(last["val_loss"].get<double>()));
    if (last.contains("val_bpb"))  // a language model on text
      row("validation bits per byte (last epoch)", format_fixed(last.value("val_bpb", 0.0), 4));
    if (last.contains("val_perplexity"))
      row("validation perplexity (last epoch)",
          format_significant(last.value("val_perplexity", 0.0), 4));
    if (last.contains("test_rmse"))  // a regression
      row("test RMSE (last epoch)", format_significant(last.value("test_rmse", 0.0)));
    row("epochs finished", std::to_string(r.epochs.size()));
    row("training time", human_duration(last.value("train_seconds", 0.0)));
  } else {
    row("epochs finished", "0 (the run is young, or was stopped before an epoch ended)");
  }
  int backoffs = 0;
  const nlohmann::json* diverged = nullptr;
  const nlohmann::json* target = nullptr;
  const nlohmann::json* early_stop = nullptr;
  const nlohmann::json* best = nullptr;  // the last: the best of the run
  // Where the run computed: each start's device (a resume may move it), in order.
  std::vector<std::string> devices;
  for (const auto& e : r.events) {
    const auto& name = e.at("event");  // events always name themselves
    if (name == "train_start" && e.contains("device") && e.at("device").is_string() &&
        (devices.empty() || devices.back() != e.at("device").get<std::string>()))
      devices.push_back(e.at("device").get<std::string>());
    backoffs += name == "oom_backoff" ? 1 : 0;
    if (name == "diverged")
      diverged = &e;
    if (name == "target_reached")
      target = &e;
    if (name == "early_stop")
      early_stop = &e;
    if (name == "best_weights")
      best = &e;
  }
  // The noise scale as the last epoch record states it: its range and the run's average.
  const nlohmann::json* noise = nullptr;
  for (auto e = r.epochs.rbegin(); e != r.epochs.rend() && !noise; ++e) {
    if (e->value("grad_noise_scale", nlohmann::json()).is_number())
      noise = &*e;
  }
  const std::string unit = tokens ? "tokens" : "samples";
  if (noise) {
    const int64_t updates = noise->value("grad_noise_scale_updates", int64_t{0});
    std::string value = human_count(noise->value("grad_noise_scale", 0.0)) + " " + unit;
    if (updates > 0)
      value += " over the last ~" + std::to_string(std::min<int64_t>(100, updates)) + " updates";
    const nlohmann::json high = noise->value("grad_noise_scale_high", nlohmann::json());
    const double low = noise->value("grad_noise_scale_low", 0.0);
    if (high.is_number()) {
      value += "; " + human_count(low) + "-" + human_count(high.get<double>()) +
               " within two standard errors";
    } else if (noise->contains("grad_noise_scale_high")) {
      value += low > 0 ? "; at least " + human_count(low) + " within two standard errors"
                       : std::string("; unbounded within two standard errors");
    }
    if (noise->value("grad_noise_scale_run_average", 0.0) > 0)
      value += "; " + human_count(noise->value("grad_noise_scale_run_average", 0.0)) +
               " averaged over the run";
    row("gradient noise scale (last epoch)", value);
  } else if (!r.updates.empty() && r.updates.back().contains("grad_noise_scale") &&
             r.updates.back()["grad_noise_scale"].is_number()) {
    row("gradient noise scale (last update)",
        human_count(r.updates.back()["grad_noise_scale"].get<double>()) + " " + unit);
  }
  if (target) {
    row("target reached", target->value("condition", std::string()) + " at update " +
                              std::to_string(target->value("step", int64_t{0})));
  }
  // A run resumed with a larger --patience trained on past its early stop: not stopped there.
  const int64_t last_step = r.updates.empty() ? 0 : r.updates.back().value("step", int64_t{0});
  if (early_stop && early_stop->value("step", int64_t{0}) >= last_step) {
    const auto best_value = early_stop->value("best", nlohmann::json());
    row("stopped early",
        "at update " + std::to_string(early_stop->value("step", int64_t{0})) + ": " +
            text_of(*early_stop, "metric") +
            (best_value.is_number()
                 ? " had not improved on " + format_significant(best_value.get<double>(), 4) +
                       " (update " + std::to_string(early_stop->value("best_step", int64_t{0})) +
                       ")"
                 : std::string(" was never a finite number")) +
            " for " + std::to_string(early_stop->value("patience", int64_t{0})) + " evaluations");
  }
  if (best) {
    row("best weights (best.safetensors)",
        text_of(*best, "metric") + " " + format_significant(best->value("value", 0.0), 4) +
            " at update " + std::to_string(best->value("step", int64_t{0})));
  }
  int64_t spikes = 0;
  for (const auto& u : r.updates)
    spikes += u.value("loss_spike", false) ? 1 : 0;
  const int64_t skipped =
      r.updates.empty() ? 0 : r.updates.back().value("skipped_updates", int64_t{0});
  if (skipped > 0) {
    row("skipped updates", std::to_string(skipped) + " (" + std::to_string(spikes) +
                               " loss spikes, " + std::to_string(skipped - spikes) +
                               " non-finite): their samples were used, their gradients not");
  }
  if (!devices.empty())
    row("device", join(devices, ", then "));
  if (backoffs > 0)
    row("out-of-memory back-offs", std::to_string(backoffs));
  std::string banner;
  if (diverged) {
    // Said first and plainly: the charts below end where the run stopped.
    const int64_t checkpoint = diverged->value("checkpoint_step", int64_t{-1});
    banner =
        "<p class=\"alert\">This run <b>diverged</b> at update " +
        std::to_string(diverged->value("step", int64_t{0})) + ": " +
        std::to_string(diverged->value("bad_updates_in_a_row", int64_t{0})) +
        " updates in a row were skipped (a non-finite loss or gradient, or a loss spike)." +
        (checkpoint >= 0 ? " Its newest checkpoint is at update " + std::to_string(checkpoint) + "."
                         : std::string()) +
        "</p>";
  }
  return banner + "<table class=\"summary\">" + rows + "</table>";
}

// config.toml with what differs from bigbatch's defaults first: the few lines that make the
// run what it is, then the rest folded away.
std::string configuration(const std::string& path) {
  if (!path_exists(path))
    return "<pre>(not found)</pre>";
  auto key_of = [](const std::string& line) {
    const auto equals = line.find(" = ");
    return line.empty() || line[0] == '#' || equals == std::string::npos ? std::string()
                                                                         : line.substr(0, equals);
  };
  std::map<std::string, std::string> defaults;
  for (const auto& line : split(render_toml_config(TrainConfig{}), '\n')) {
    if (const std::string key = key_of(line); !key.empty())
      defaults[key] = line;
  }
  const std::vector<std::string> lines = split(read_text_file(path), '\n');
  std::string optimizer;
  for (const auto& line : lines) {
    if (key_of(line) == "optimizer")
      optimizer = line.substr(line.find(" = ") + 3);  // 'sgd', quoted as TOML writes it
  }
  // Another optimizer's settings (an SGD run's adam-*) say nothing of this run: left out.
  const auto used = [&](const std::string& key) {
    if (optimizer.empty())
      return true;
    if (key.rfind("adam-", 0) == 0)
      return optimizer == "'adamw'" || optimizer == "'lamb'";
    if (key == "lars-trust")
      return optimizer == "'lars'" || optimizer == "'lamb'";
    if (key == "momentum" || key == "nesterov")
      return optimizer == "'sgd'" || optimizer == "'lars'";
    return true;
  };
  std::string changed, same;
  for (const auto& line : lines) {
    const std::string key = key_of(line);
    if (key.empty() || !used(key))
      continue;
    const auto d = defaults.find(key);
    (d != defaults.end() && d->second == line ? same : changed) += line + "\n";
  }
  return "<p>Set for this run (differs from the defaults, or resolved from the data; other "
         "optimizers' settings left out):</p><pre>" +
         xml_escape(changed.empty() ? "(nothing: the defaults)\n" : changed) +
         "</pre><details><summary>the defaults it kept</summary><pre>" + xml_escape(same) +
         "</pre></details>";
}

// --global-batch auto: the batch over the samples, with the noise scale and its band's low end
// at each check (the one that decides marked: --growth-predict-at), the checks that doubled it at
// once, and each branch test's proposal where it began, kept or not.
template <typename Add>
void add_growth_chart(const RunRecords& r, Add add) {
  std::vector<nlohmann::json> checks, doubled, kept, rejected;
  for (const auto& e : r.events) {
    const auto& name = e.at("event");  // every event record has its name
    if (name == "batch_test")
      (e.value("kept", false) ? kept : rejected).push_back(e);
    if (name != "batch_check")
      continue;
    checks.push_back(e);
    if (e.value("grow", false))
      doubled.push_back(e);
  }
  if (checks.empty())
    return;
  LineChart c;
  c.title = "automatic batch: the global batch and the noise scale at each check";
  c.x_label = "samples";
  c.y_label = "samples";  // the checks state the noise scale in samples
  c.log_y = true;
  c.series.push_back(
      {"global batch", kBlue, record_points(r.updates, "samples_seen", "global_batch"), false});
  // A run from before --growth-predict-at predicted at the low end.
  const bool at_estimate = checks.front().value("predicted_at", "low") == "estimate";
  c.series.push_back({at_estimate ? "noise scale (decides)" : "noise scale", kPurple,
                      record_points(checks, "samples_seen", "noise_scale"), true});
  c.series.push_back({at_estimate ? "its band's low end" : "its band's low end (decides)", kOrange,
                      record_points(checks, "samples_seen", "noise_scale_low"), true});
  if (!doubled.empty()) {
    c.series.push_back(
        {"doubled to", kGreen, record_points(doubled, "samples_seen", "proposed"), true});
  }
  if (!kept.empty()) {
    c.series.push_back(
        {"branch test kept", kGreen, record_points(kept, "samples_seen", "proposed"), true});
  }
  if (!rejected.empty()) {
    c.series.push_back(
        {"branch test rejected", kRed, record_points(rejected, "samples_seen", "proposed"), true});
  }
  add(c);
}

}  // namespace

std::string render_run_report(const std::string& run_dir, std::vector<std::string>* skipped_lines) {
  const std::string metrics_path = run_dir + "/metrics.jsonl";
  if (!path_exists(metrics_path)) {
    throw Error(ErrorKind::Io,
                "'" + run_dir + "' has no metrics.jsonl, so there is nothing to report",
                "give a run directory written by bigbatch train");
  }
  const RunRecords r = read_run_records(metrics_path);
  const std::vector<nlohmann::json> held_out = r.held_out();  // epochs and --eval-every's

  std::string charts;
  auto add = [&](LineChart chart) { charts += "<figure>" + render_svg(chart) + "</figure>"; };

  // A log axis keeps the whole run readable after a spike (a diverging run reaches 1e25); a
  // loss that can be zero or negative (a user's own) stays linear.
  bool positive_losses = true;
  for (const auto* records : {&r.updates, &held_out}) {
    for (const auto& record : *records) {
      for (const char* key : {"loss", "train_loss", "test_loss", "val_loss"}) {
        const auto v = record.value(key, nlohmann::json());
        if (v.is_number() && !(v.get<double>() > 0))
          positive_losses = false;
      }
    }
  }
  auto loss_chart = [&](const char* x_key, const std::string& x_label) {
    LineChart c;
    c.title = "loss against " + x_label;
    c.x_label = x_label;
    c.y_label = "loss";
    c.log_y = positive_losses;
    // Each update's loss is one batch's: the smoothed curve (TensorBoard's) shows the trend.
    const auto per_update = record_points(r.updates, x_key, "loss");
    c.series.push_back({"train (update)", kLightBlue, per_update, false});
    c.series.push_back({"train (smoothed)", kBlue, smoothed(per_update), false});
    c.series.push_back(
        {"train (epoch)", kOrange, record_points(r.epochs, x_key, "train_loss"), true});
    c.series.push_back({"test", kRed, record_points(held_out, x_key, "test_loss"), true});
    c.series.push_back({"validation", kGreen, record_points(held_out, x_key, "val_loss"), true});
    return c;
  };
  const bool tokens = is_language_model(r);
  add(loss_chart("step", "updates"));
  add(loss_chart(tokens ? "tokens_seen" : "samples_seen", tokens ? "tokens" : "samples"));
  if (tokens) {
    LineChart c;
    c.title = "bits per byte against tokens (held-out text)";
    c.x_label = "tokens";
    c.y_label = "bits per byte";
    c.series.push_back(
        {"validation", kGreen, record_points(held_out, "tokens_seen", "val_bpb"), true});
    add(c);
  }
  for (const auto& [x_key, x_label] : {std::pair{"step", "updates"}, {"samples_seen", "samples"}}) {
    LineChart c;
    c.title = std::string("accuracy against ") + x_label;
    c.x_label = x_label;
    c.y_label = "accuracy (%)";
    c.series.push_back(
        {"train", kOrange, record_points(r.epochs, x_key, "train_accuracy", 100), true});
    c.series.push_back({"test", kRed, record_points(held_out, x_key, "test_accuracy", 100), true});
    c.series.push_back(
        {"validation", kGreen, record_points(held_out, x_key, "val_accuracy", 100), true});
    add(c);
  }
  // Per-update series against updates: one row per chart, at most two series each.
  struct Line {
    const char* name;
    const char* colour;
    const char* key;
    double scale;
  };
  struct UpdateChart {
    const char* title;
    const char* y_label;
    bool log_y;
    std::vector<Line> lines;
  };
  std::vector<UpdateChart> update_charts = {
      {"learning rate (warmup and decay)", "learning rate", false, {{"lr", kBlue, "lr", 1}}},
      {"gradient norm (mean gradient, before clipping)",
       "L2 norm",
       true,
       {{"grad norm", kBlue, "grad_norm", 1}}},
      // Both in items: tokens for a language model, whose mean is over them.
      {"gradient noise scale beside the global batch",
       tokens ? "tokens" : "samples",
       true,
       {{"noise scale B_noise", kPurple, "grad_noise_scale", 1},
        {"global batch", kBlue, "items", 1}}},
      {"throughput", tokens ? "tokens / s" : "samples / s", false,
       tokens ? std::vector<Line>{{"tokens/s", kGreen, "tokens_per_s", 1}}
              : std::vector<Line>{{"samples/s", kGreen, "samples_per_s", 1}}},
      // Tensors and the whole process differ by orders of magnitude: log scale.
      {"memory",
       "MiB",
       true,
       {{"tensor peak", kBlue, "peak_bytes", 1 / kMiB},
        {"resident peak", kOrange, "rss_peak_bytes", 1 / kMiB}}},
  };
  const bool adascale = std::any_of(r.updates.begin(), r.updates.end(),
                                    [](const nlohmann::json& u) { return u.contains("lr_gain"); });
  if (adascale) {
    update_charts.insert(update_charts.begin() + 1,
                         {"AdaScale gain (1: no gain from the larger batch; S: the linear rule)",
                          "gain r",
                          false,
                          {{"gain", kPurple, "lr_gain", 1}}});
  }
  add_growth_chart(r, add);
  for (const auto& spec : update_charts) {
    LineChart c;
    c.title = spec.title;
    c.x_label = "updates";
    c.y_label = spec.y_label;
    c.log_y = spec.log_y;
    for (const auto& line : spec.lines) {
      c.series.push_back(
          {line.name, line.colour, record_points(r.updates, "step", line.key, line.scale), false});
    }
    add(c);
  }

  std::string html = html_page_start("bigbatch run " + run_dir);
  html += "<h1>bigbatch run: " + xml_escape(run_dir) + "</h1>\n";
  if (!r.skipped.empty()) {
    std::string items;
    for (const std::string& line : r.skipped)
      items += "<li>" + xml_escape(line) + "</li>";
    html += "<p>metrics.jsonl: " + std::to_string(r.skipped.size()) +
            " line(s) skipped, being no record (changed by hand or by another program):</p><ul>" +
            items + "</ul>\n";
  }
  if (skipped_lines)
    *skipped_lines = r.skipped;
  html += section("summary", summary(r));
  html += section("training", "<div class=\"charts\">" + charts + "</div>");
  html +=
      section("batch plan", "<pre>" + xml_escape(optional_file(run_dir + "/plan.txt")) + "</pre>");
  html += section("configuration", configuration(run_dir + "/config.toml"));
  html += "</body></html>\n";
  return html;
}

std::string write_run_report(const std::string& run_dir, std::vector<std::string>* skipped_lines) {
  const std::string path = run_dir + "/report.html";
  atomic_write_file(path, render_run_report(run_dir, skipped_lines), Links::Replace);
  return path;
}

}  // namespace bigbatch
