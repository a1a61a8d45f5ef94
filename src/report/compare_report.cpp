#include "report/compare_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "report/run_records.h"
#include "report/svg_chart.h"

namespace bigbatch {

namespace {

struct ComparedRun {
  std::string dir;
  RunRecords records;
  std::vector<nlohmann::json> held_out;
  bool tokens = false;  // a language model: its curves are against tokens
  std::string model;    // as its config.toml names it; "-" when not known
};

// The model a run's config.toml names ("cnn", "torchscript:lm.pt"), read as the line TOML
// writes; "-" without one.
std::string model_of_run(const std::string& dir) {
  const std::string path = dir + "/config.toml";
  if (!path_exists(path))
    return "-";
  for (const std::string& line : split(read_text_file(path), '\n')) {
    const std::string prefix = "model = ";
    if (line.rfind(prefix, 0) == 0) {
      std::string value = trim(line.substr(prefix.size()));
      if (value.size() >= 2 && (value.front() == '\'' || value.front() == '"'))
        value = value.substr(1, value.size() - 2);
      return value.empty() ? "-" : value;
    }
  }
  return "-";
}

// The best of `key` over the held-out records (the lowest, or the highest when `rises`).
std::optional<double> best_of(const std::vector<nlohmann::json>& records, const char* key,
                              bool rises) {
  std::optional<double> best;
  for (const auto& r : records) {
    const auto v = r.value(key, nlohmann::json());
    if (v.is_number() && (!best || (rises ? v.get<double>() > *best : v.get<double>() < *best)))
      best = v.get<double>();
  }
  return best;
}

std::string cell(const std::optional<double>& value, bool percent = false) {
  if (!value)
    return "-";
  return percent ? format_fixed(100 * *value, 2) + "%" : format_significant(*value, 4);
}

std::string table(const std::vector<ComparedRun>& runs) {
  std::string html =
      "<table class=\"summary\"><tr><th>run</th><th>model</th><th>global batch</th><th>updates</th>"
      "<th>samples</th><th>final train loss (smoothed)</th><th>best validation loss</th>"
      "<th>best validation accuracy</th><th>test accuracy (last)</th><th>training time</th>"
      "<th>samples/s (over the run)</th></tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const ComparedRun& run = runs[i];
    const auto& updates = run.records.updates;
    std::optional<double> global_batch, steps, samples, final_loss, test_accuracy, seconds;
    if (!updates.empty()) {
      const auto& last = updates.back();
      if (last.contains("global_batch"))
        global_batch = last.value("global_batch", 0.0);
      steps = last.value("step", 0.0);
      samples = last.value("samples_seen", 0.0);
      const auto curve = smoothed(record_points(updates, "step", "loss"));
      if (!curve.empty())
        final_loss = curve.back().y;
    }
    std::optional<double> throughput;
    if (!run.records.epochs.empty()) {
      const auto& last = run.records.epochs.back();
      if (last.contains("test_accuracy") && last["test_accuracy"].is_number())
        test_accuracy = last["test_accuracy"].get<double>();
      seconds = last.value("train_seconds", 0.0);
      if (*seconds > 0 && samples)
        throughput = *samples / *seconds;
    }
    html += "<tr><td><span style=\"color:" + std::string(chart_colour(i)) + "\">&#9632;</span> " +
            xml_escape(run.dir) + "</td><td>" + xml_escape(run.model) + "</td><td>" +
            cell(global_batch) + "</td><td>" + cell(steps) + "</td><td>" +
            (samples ? human_count(*samples) : "-") + "</td><td>" + cell(final_loss) + "</td><td>" +
            cell(best_of(run.held_out, "val_loss", false)) + "</td><td>" +
            cell(best_of(run.held_out, "val_accuracy", true), true) + "</td><td>" +
            cell(test_accuracy, true) + "</td><td>" + (seconds ? human_duration(*seconds) : "-") +
            "</td><td>" + (throughput ? human_count(*throughput) : "-") + "</td></tr>";
  }
  return html + "</table>";
}

}  // namespace

std::string render_comparison_report(const std::vector<std::string>& run_dirs) {
  std::vector<ComparedRun> runs;
  for (const auto& dir : run_dirs) {
    const std::string metrics = dir + "/metrics.jsonl";
    if (!path_exists(metrics)) {
      throw Error(ErrorKind::Io,
                  "'" + dir + "' has no metrics.jsonl, so there is nothing to compare",
                  "give run directories written by bigbatch train");
    }
    ComparedRun run{dir, read_run_records(metrics), {}, false, model_of_run(dir)};
    run.held_out = run.records.held_out();
    run.tokens = std::any_of(run.records.updates.begin(), run.records.updates.end(),
                             [](const nlohmann::json& u) { return u.contains("tokens_per_s"); });
    runs.push_back(std::move(run));
  }
  // Language models and image runs together: samples still line them up.
  const bool tokens =
      std::all_of(runs.begin(), runs.end(), [](const ComparedRun& r) { return r.tokens; });
  const char* data_key = tokens ? "tokens_seen" : "samples_seen";
  const std::string data_label = tokens ? "tokens" : "samples";

  struct Curve {
    std::string title;
    std::string y_label;
    const char* x_key;
    std::string x_label;
    bool held_out;  // from the evaluations, else from the updates (smoothed where noisy)
    const char* y_key;
    double scale;
    bool smooth;
    bool log_y;
  };
  const std::vector<Curve> curves = {
      {"training loss (smoothed) against " + data_label, "loss", data_key, data_label, false,
       "loss", 1, true, true},
      {"training loss (smoothed) against updates", "loss", "step", "updates", false, "loss", 1,
       true, true},
      {"validation loss against " + data_label, "loss", data_key, data_label, true, "val_loss", 1,
       false, true},
      {"validation accuracy against " + data_label, "accuracy (%)", data_key, data_label, true,
       "val_accuracy", 100, false, false},
      {"validation bits per byte against " + data_label, "bits per byte", data_key, data_label,
       true, "val_bpb", 1, false, false},
      {"test accuracy against " + data_label, "accuracy (%)", data_key, data_label, true,
       "test_accuracy", 100, false, false},
      {"learning rate against " + data_label, "learning rate", data_key, data_label, false, "lr", 1,
       false, false},
      {"global batch against " + data_label, "samples per update", data_key, data_label, false,
       "global_batch", 1, false, true},
      {"throughput against updates", "samples / s", "step", "updates", false, "samples_per_s", 1,
       true, false},
  };
  std::string charts;
  for (const Curve& curve : curves) {
    LineChart c;
    c.title = curve.title;
    c.x_label = curve.x_label;
    c.y_label = curve.y_label;
    c.log_y = curve.log_y;
    bool any = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto& records = curve.held_out ? runs[i].held_out : runs[i].records.updates;
      auto points = record_points(records, curve.x_key, curve.y_key, curve.scale);
      if (curve.smooth)
        points = smoothed(points);
      any = any || !points.empty();
      c.series.push_back({runs[i].dir, chart_colour(i), points, curve.held_out});
    }
    if (any)  // a figure no run has (bpb for images) is left out, not drawn empty
      charts += "<figure>" + render_svg(c) + "</figure>";
  }

  const std::string title = "bigbatch: " + std::to_string(runs.size()) + " runs compared";
  std::string html = html_page_start(title) + "<h1>" + xml_escape(title) + "</h1>\n";
  html += "<section><h2>runs</h2>" + table(runs) + "</section>\n";
  html +=
      "<section><h2>curves</h2><p>Runs at different global batches do different numbers of "
      "updates for the same data: the curves against " +
      data_label +
      " compare what each learned from the same data, the ones against updates what each "
      "did per optimizer step. Training losses are smoothed as TensorBoard smooths them "
      "(an exponential moving average over about the last 10 updates).</p><div "
      "class=\"charts\">" +
      charts + "</div></section>\n";
  html += "</body></html>\n";
  return html;
}

void write_comparison_report(const std::vector<std::string>& run_dirs, const std::string& path) {
  atomic_write_file(path, render_comparison_report(run_dirs));
}

}  // namespace bigbatch
