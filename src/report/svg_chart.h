#pragma once
// Line charts as inline SVG: self-contained (no script, no fonts or styles fetched), so a
// report opens anywhere, offline, and prints. Axes get "nice" ticks (1, 2, 5 x 10^k), either
// axis may be logarithmic, and long series are thinned to a bounded number of points per
// series so a report of a million updates stays small.
//
//   LineChart chart;
//   chart.title = "loss";  chart.x_label = "updates";
//   chart.series.push_back({"train", "#1f77b4", {{1, 2.3}, {2, 1.9}}});
//   std::string svg = render_svg(chart);
#include <cstddef>
#include <string>
#include <vector>

namespace bigbatch {

struct ChartPoint {
  double x = 0;
  double y = 0;
};

struct ChartSeries {
  std::string name;
  std::string color;  // CSS colour
  std::vector<ChartPoint> points;
  bool markers = false;  // dots at the points (few points: per-epoch values)
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  std::vector<ChartSeries> series;
  // Vertical reference lines (e.g. a measured critical batch), labelled.
  std::vector<std::pair<double, std::string>> x_markers;
  // Horizontal ones (e.g. a target accuracy).
  std::vector<std::pair<double, std::string>> y_markers;
  int width = 560;
  int height = 300;
};

// Non-finite points, and non-positive ones on a log axis, are left out. A chart with no point
// left renders a frame that says "no data". The legend sits above the plot, never on the data
// (the chart grows by its rows).
std::string render_svg(const LineChart& chart);

// A number on an axis or in a tooltip, as people write it: "40k", "1.5M", "0.25", "3e-5",
// "1e25" (never "4e+04").
std::string chart_number(double value);

// Tick positions covering [low, high]: about `target` of them at 1, 2 or 5 x 10^k.
std::vector<double> nice_ticks(double low, double high, int target = 5);

// The i-th colour of a colour-blind-safe palette (Okabe-Ito), cycling.
const char* chart_colour(size_t i);

// The start of a self-contained HTML page for these charts: doctype, title, and the one
// stylesheet the run report and the sweep report share; the caller appends the body and
// "</body></html>".
std::string html_page_start(const std::string& title);

// Text for an SVG/HTML text node or attribute.
std::string xml_escape(const std::string& text);

}  // namespace bigbatch
