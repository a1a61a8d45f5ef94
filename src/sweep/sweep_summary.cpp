#include "sweep/sweep_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/files.h"
#include "core/text.h"
#include "report/run_records.h"

namespace bigbatch {

namespace {

// Empty when unset; `decimals` < 0: 4 significant digits, else that many decimals.
std::string optional_number(const std::optional<double>& v, int decimals = -1) {
  if (!v)
    return "";
  char buffer[32];
  if (decimals < 0) {
    std::snprintf(buffer, sizeof buffer, "%.4g", *v);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, *v);
  }
  return buffer;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Charts show accuracies in percent.
double chart_scale(const StopTarget& target) {
  return target.metric == "accuracy" ? 100 : 1;
}

// "best accuracy", "best validation bits per byte": a chart's words for the metric.
std::string metric_words(const StopTarget& target) {
  return target.metric == "bpb" ? "bits per byte" : target.metric;
}

}  // namespace

std::string target_text(const StopTarget& target) {
  if (target.metric == "accuracy" && target.split.empty())
    return format_significant(100 * target.value) + "%";
  return target.to_string();
}

std::string metric_text(const StopTarget& target, double value) {
  if (target.metric == "accuracy")
    return optional_number(100 * value, 2) + "%";
  return optional_number(value);
}

CellResult read_cell_result(const SweepCell& cell, const std::string& cell_dir,
                            const StopTarget& target) {
  CellResult result;
  result.cell = cell;
  result.status = "not run";
  const std::string metrics = cell_dir + "/metrics.jsonl";
  if (!path_exists(metrics))
    return result;
  const RunRecords r = read_run_records(metrics);
  result.status = path_exists(cell_dir + "/weights.safetensors") ? "done" : "interrupted";
  if (!r.updates.empty()) {
    result.updates = r.updates.back().value("step", int64_t{0});
    result.samples = r.updates.back().value("samples_seen", int64_t{0});
  }
  double noise_sum = 0;
  int noise_count = 0;
  for (const auto& u : r.updates) {
    result.peak_lr = std::max(result.peak_lr, u.value("lr", 0.0));
    const auto noise = u.value("grad_noise_scale", nlohmann::json());
    if (noise.is_number()) {
      noise_sum += noise.get<double>();
      ++noise_count;
    }
  }
  if (noise_count > 0)
    result.mean_noise_scale = noise_sum / noise_count;
  for (const auto& e : r.events) {
    if (e.at("event") == "diverged" && result.status != "done")
      result.status = "diverged";
    if (e.at("event") == "target_reached") {
      result.reached = true;
      result.updates_to_target = e.value("step", int64_t{0});
      result.samples_to_target = e.value("samples_seen", int64_t{0});
      result.seconds_to_target = e.value("train_seconds", 0.0);
    }
  }
  // The split the target reads: the validation one when the run has it (as train decides).
  const bool has_validation = !r.epochs.empty() && r.epochs.front().contains("val_loss");
  result.metric = target.metric_in(has_validation);
  const char* metric = result.metric.c_str();
  // The best and the curves over every held-out figure: the epochs' and --eval-every's.
  const std::vector<nlohmann::json> held_out = r.held_out();
  for (const auto& e : held_out) {
    const auto value = e.value(metric, nlohmann::json());
    if (value.is_number()) {
      const double v = value.get<double>();
      if (!result.best || (target.at_least ? v > *result.best : v < *result.best))
        result.best = v;
    }
  }
  for (const auto& e : r.epochs) {
    result.final_train_loss = e.value("train_loss", nlohmann::json()).is_number()
                                  ? std::optional<double>(e.at("train_loss").get<double>())
                                  : std::nullopt;
  }
  result.curve_by_updates = record_points(held_out, "step", metric, chart_scale(target));
  result.curve_by_samples = record_points(held_out, "samples_seen", metric, chart_scale(target));
  return result;
}

std::string summary_csv(const std::vector<CellResult>& results) {
  std::string out =
      "cell,global_batch,lr_scaling,warmup,peak_lr,status,reached,updates_to_target,"
      "samples_to_target,seconds_to_target,best,metric,final_train_loss,"
      "mean_noise_scale,updates,samples\n";
  for (const auto& r : results) {
    char line[512];
    std::snprintf(
        line, sizeof line, "%s,%lld,%s,%s,%.6g,%s,%s,%s,%s,%s,%s,%s,%s,%s,%lld,%lld\n",
        r.cell.run_name().c_str(), static_cast<long long>(r.cell.global_batch),
        r.cell.lr_scaling.c_str(), r.cell.warmup.c_str(), r.peak_lr, r.status.c_str(),
        r.reached ? "true" : "false", r.reached ? std::to_string(r.updates_to_target).c_str() : "",
        r.reached ? std::to_string(r.samples_to_target).c_str() : "",
        r.reached ? optional_number(r.seconds_to_target, 2).c_str() : "",
        r.best ? format_significant(*r.best).c_str() : "", r.metric.c_str(),
        optional_number(r.final_train_loss).c_str(), optional_number(r.mean_noise_scale, 1).c_str(),
        static_cast<long long>(r.updates), static_cast<long long>(r.samples));
    out += line;
  }
  return out;
}

std::string summary_markdown(const std::vector<CellResult>& results, const StopTarget& target) {
  std::string out =
      "| global batch | LR rule | warmup | peak LR | updates to " + target_text(target) +
      " | samples to target | time to target | best " + metric_words(target) +
      " | final train loss "
      "| mean noise scale | status |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : results) {
    char line[512];
    std::snprintf(
        line, sizeof line, "| %lld | %s | %s | %.4g | %s | %s | %s | %s | %s | %s | %s |\n",
        static_cast<long long>(r.cell.global_batch), r.cell.lr_scaling.c_str(),
        r.cell.warmup.c_str(), r.peak_lr,
        r.reached ? std::to_string(r.updates_to_target).c_str() : "not reached",
        r.reached ? human_count(double(r.samples_to_target)).c_str() : "-",
        r.reached ? human_duration(r.seconds_to_target).c_str() : "-",
        r.best ? metric_text(target, *r.best).c_str() : "-",
        optional_number(r.final_train_loss).c_str(),
        r.mean_noise_scale ? human_count(*r.mean_noise_scale).c_str() : "-", r.status.c_str());
    out += line;
  }
  return out;
}

std::string sweep_report_html(const std::vector<CellResult>& results, const StopTarget& target,
                              const std::string& title) {
  const double scale = chart_scale(target);
  const std::string words = metric_words(target);
  const std::string unit = target.metric == "accuracy" ? " (%)" : "";
  // Cells grouped into series by LR rule and warmup, in grid order.
  std::vector<std::string> series_order;
  std::map<std::string, std::vector<const CellResult*>> by_series;
  std::vector<double> noise_scales;
  for (const auto& r : results) {
    const std::string key = r.cell.series();
    if (!by_series.count(key))
      series_order.push_back(key);
    by_series[key].push_back(&r);
    if (r.mean_noise_scale)
      noise_scales.push_back(*r.mean_noise_scale);
  }

  LineChart steps;
  steps.title = "updates to " + target_text(target) + " against the global batch";
  steps.x_label = "global batch";
  steps.y_label = "updates to target";
  steps.log_x = steps.log_y = true;
  LineChart accuracy;
  accuracy.title = "best " + words + " against the global batch";
  accuracy.x_label = "global batch";
  accuracy.y_label = "best " + words + unit;
  accuracy.log_x = true;
  for (size_t i = 0; i < series_order.size(); ++i) {
    ChartSeries reached{series_order[i], chart_colour(i), {}, true};
    ChartSeries best{series_order[i], chart_colour(i), {}, true};
    for (const CellResult* r : by_series[series_order[i]]) {
      if (r->reached)
        reached.points.push_back({double(r->cell.global_batch), double(r->updates_to_target)});
      if (r->best)
        best.points.push_back({double(r->cell.global_batch), scale * *r->best});
    }
    steps.series.push_back(reached);
    accuracy.series.push_back(best);
  }
  // Perfect scaling from the smallest batch that reached the target: updates x batch constant.
  const CellResult* first = nullptr;
  for (const auto& r : results) {
    if (r.reached && (!first || r.cell.global_batch < first->cell.global_batch))
      first = &r;
  }
  if (first) {
    ChartSeries perfect{"perfect scaling", "#999999", {}, false};
    for (const auto& r : results) {
      const double b = double(r.cell.global_batch);
      if (b >= double(first->cell.global_batch)) {
        perfect.points.push_back(
            {b, double(first->updates_to_target) * double(first->cell.global_batch) / b});
      }
    }
    std::sort(perfect.points.begin(), perfect.points.end(),
              [](const ChartPoint& a, const ChartPoint& b) { return a.x < b.x; });
    steps.series.push_back(perfect);
  }
  if (!noise_scales.empty()) {
    const double critical = median(noise_scales);
    steps.x_markers.push_back({critical, "B_noise ~ " + human_count(critical)});
    accuracy.x_markers.push_back({critical, "B_noise ~ " + human_count(critical)});
  }

  LineChart by_updates, by_samples;
  const std::string curve_name = results.empty() ? words : results.front().metric;
  by_updates.title = curve_name + " against updates";
  by_updates.x_label = "updates";
  by_updates.log_x = true;
  by_samples.title = curve_name + " against samples";
  by_samples.x_label = "samples";
  by_updates.y_label = by_samples.y_label = words + unit;
  by_updates.width = by_samples.width = 720;
  by_updates.height = by_samples.height = 380;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const std::string name = "B " + std::to_string(r.cell.global_batch) + ", " + r.cell.series();
    by_updates.series.push_back({name, chart_colour(i), r.curve_by_updates, true});
    by_samples.series.push_back({name, chart_colour(i), r.curve_by_samples, true});
  }

  const std::string target_words = target_text(target);
  accuracy.y_markers.push_back({scale * target.value, "target " + target_words});
  std::string html = html_page_start(title) + "<h1>" + xml_escape(title) + "</h1>\n";
  if (first) {
    html +=
        "<p>Shallue et al.'s three regimes read off the first chart: where updates halve with "
        "each doubling of the batch (perfect scaling, the grey line), where they fall more "
        "slowly (diminishing returns), and where they stop falling (maximal data "
        "parallelism). The dashed line marks the measured gradient noise scale, an estimate "
        "of the critical batch.</p>\n";
    html += "<div class=\"charts\"><figure>" + render_svg(steps) + "</figure><figure>" +
            render_svg(accuracy) + "</figure></div>\n";
  } else {
    // Nothing to count updates to: the best each cell reached leads, against the target.
    accuracy.title =
        "best " + words + " so far against the global batch (no cell reached " + target_words + ")";
    html += "<p>No cell has reached the target of " + xml_escape(target_words) +
            " yet, so there are no updates to it to compare: the chart shows the best " +
            xml_escape(words) +
            " each cell reached, with the target dashed. Train longer (--max-epochs), or ease "
            "the target.</p>\n";
    html += "<div class=\"charts\"><figure>" + render_svg(accuracy) + "</figure></div>\n";
  }
  html += "<div class=\"charts\"><figure>" + render_svg(by_updates) + "</figure><figure>" +
          render_svg(by_samples) + "</figure></div>\n";
  html +=
      "<h2>cells</h2><table><tr><th>global batch</th><th>LR rule</th><th>warmup</th>"
      "<th>peak LR</th><th>updates to target</th><th>samples to target</th><th>best " +
      xml_escape(words) + "</th><th>mean noise scale</th><th>status</th></tr>";
  for (const auto& r : results) {
    char row[512];
    std::snprintf(
        row, sizeof row,
        "<tr><td>%lld</td><td>%s</td><td>%s</td><td>%.4g</td><td>%s</td><td>%s</td><td>%s</td>"
        "<td>%s</td><td>%s</td></tr>",
        static_cast<long long>(r.cell.global_batch), xml_escape(r.cell.lr_scaling).c_str(),
        xml_escape(r.cell.warmup).c_str(), r.peak_lr,
        r.reached ? std::to_string(r.updates_to_target).c_str() : "not reached",
        r.reached ? human_count(double(r.samples_to_target)).c_str() : "-",
        r.best ? metric_text(target, *r.best).c_str() : "-",
        r.mean_noise_scale ? human_count(*r.mean_noise_scale).c_str() : "-",
        xml_escape(r.status).c_str());
    html += row;
  }
  html += "</table>\n</body></html>\n";
  return html;
}

}  // namespace bigbatch
