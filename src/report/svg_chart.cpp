#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace bigbatch {

namespace {

constexpr size_t kMaxPointsPerSeries = 1500;
constexpr int kLeft = 64, kRight = 16, kTitle = 30, kBottom = 44;
constexpr int kLegendRow = 14;
// A 10px label's average character width, for keeping marker labels apart.
constexpr double kMarkerCharWidth = 6;

}  // namespace

std::string chart_number(double v) {
  char buffer[48];
  const double magnitude = std::fabs(v);
  // 9999.6 would print as 1e+04 in %.4g: it belongs to the next branch ("10k").
  if (v == 0 || (magnitude >= 1e-3 && magnitude < 9999.5)) {
    std::snprintf(buffer, sizeof buffer, "%.4g", v);
    return buffer;
  }
  if (magnitude >= 9999.5 && magnitude < 999.5e12) {
    static const char* const suffixes[] = {"k", "M", "G", "T"};
    int power = 0;
    double scaled = v / 1e3;
    // 999.95k prints as 1e+03k in %.3g: carry it into the next suffix ("1M").
    while (std::fabs(scaled) >= 999.5 && power < 3) {
      scaled /= 1e3;
      ++power;
    }
    std::snprintf(buffer, sizeof buffer, "%.3g%s", scaled, suffixes[power]);
    return buffer;
  }
  // Mantissa and a plain exponent: 3e-5, 2.5e-7, 1e25.
  const int exponent = static_cast<int>(std::floor(std::log10(magnitude)));
  double mantissa = v / std::pow(10.0, exponent);
  if (std::fabs(mantissa) >= 9.995) {  // rounding carries into the next power
    mantissa /= 10;
    std::snprintf(buffer, sizeof buffer, "%.3ge%d", mantissa, exponent + 1);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3ge%d", mantissa, exponent);
  }
  return buffer;
}

namespace {

std::string number(double v) {
  return chart_number(v);
}

std::string coordinate(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", v);
  return buffer;
}

// Maps data to pixels along one axis, linear or log10.
struct Axis {
  double low = 0, high = 1;
  bool log = false;
  double pixel_low = 0, pixel_high = 1;

  double transform(double v) const { return log ? std::log10(v) : v; }
  double to_pixel(double v) const {
    const double t = (transform(v) - transform(low)) / (transform(high) - transform(low));
    return pixel_low + t * (pixel_high - pixel_low);
  }
};

bool usable(double v, bool log) {
  return std::isfinite(v) && (!log || v > 0);
}

std::vector<double> log_ticks(double low, double high) {
  std::vector<double> ticks;
  for (double decade = std::pow(10.0, std::floor(std::log10(low))); decade <= high * 1.0001;
       decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double t = decade * m;
      if (t >= low * 0.9999 && t <= high * 1.0001)
        ticks.push_back(t);
    }
  }
  if (ticks.size() > 8) {  // many decades: the powers of ten alone
    std::vector<double> powers;
    for (double t : ticks) {
      const double exponent = std::log10(t);
      if (std::fabs(exponent - std::round(exponent)) < 1e-9)
        powers.push_back(t);
    }
    ticks = powers;
  }
  return ticks;
}

}  // namespace

std::vector<double> nice_ticks(double low, double high, int target) {
  if (!(high > low))
    return {low};
  const double raw = (high - low) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw)
      break;
  }
  std::vector<double> ticks;
  // Integer multiples of the step: no drift from adding it up.
  for (auto k = static_cast<int64_t>(std::ceil(low / step - 1e-9));
       double(k) * step <= high + step * 1e-9; ++k)
    ticks.push_back(double(k) * step);
  return ticks;
}

const char* chart_colour(size_t i) {
  static const char* const palette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                        "#CC79A7", "#56B4E9", "#F0E442", "#000000"};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string html_page_start(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
         xml_escape(title) +
         "</title><style>"
         "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
         "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
         ".charts{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}"
         "svg.chart{background:#fff;border:1px solid #ddd}"
         ".frame{fill:none;stroke:#999}.grid{stroke:#eee}.marker{stroke:#888;stroke-dasharray:4 3}"
         ".title{font-size:13px;font-weight:bold}.tick,.legend,.marker-label{font-size:10px}"
         ".label{font-size:11px}.empty{font-size:12px;fill:#999}"
         ".alert{background:#fde8e0;border-left:4px solid #D55E00;padding:8px 12px}"
         "table.summary th{text-align:left;padding-right:16px;font-weight:normal;color:#555}"
         "table.cells{border-collapse:collapse;font-size:13px}"
         "table.cells td,table.cells th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
         "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
         "</style></head><body>\n";
}

std::string render_svg(const LineChart& chart) {
  // The legend sits in rows between the title and the plot, never on the data: entries of the
  // series that have points, wrapped to the plot's width; the chart grows by its rows.
  struct LegendEntry {
    const ChartSeries* series;
    int x, row;
  };
  std::vector<LegendEntry> legend;
  {
    int x = kLeft, row = 0;
    for (const auto& s : chart.series) {
      const bool has_point =
          std::any_of(s.points.begin(), s.points.end(), [&](const ChartPoint& p) {
            return usable(p.x, chart.log_x) && usable(p.y, chart.log_y);
          });
      if (!has_point)
        continue;
      const int width = 14 + 6 * static_cast<int>(s.name.size()) + 12;
      if (x > kLeft && x + width > chart.width - kRight) {
        x = kLeft;
        ++row;
      }
      legend.push_back({&s, x, row});
      x += width;
    }
  }
  const int legend_rows = legend.empty() ? 0 : legend.back().row + 1;
  const int kTop = kTitle + kLegendRow * legend_rows;
  const int w = chart.width, h = chart.height + kLegendRow * legend_rows;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" +
                    std::to_string(w) + "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " +
                    std::to_string(w) + " " + std::to_string(h) + "\" role=\"img\" aria-label=\"" +
                    xml_escape(chart.title) + "\">";
  svg += "<text x=\"" + std::to_string(w / 2) +
         "\" y=\"18\" text-anchor=\"middle\" class=\"title\">" + xml_escape(chart.title) +
         "</text>";

  double x_low = std::numeric_limits<double>::infinity(), x_high = -x_low;
  double y_low = x_low, y_high = -x_low;
  for (const auto& s : chart.series) {
    for (const auto& p : s.points) {
      if (!usable(p.x, chart.log_x) || !usable(p.y, chart.log_y))
        continue;
      x_low = std::min(x_low, p.x);
      x_high = std::max(x_high, p.x);
      y_low = std::min(y_low, p.y);
      y_high = std::max(y_high, p.y);
    }
  }
  // A horizontal reference (a target) is part of what the chart shows, reached or not.
  if (std::isfinite(x_low)) {
    for (const auto& marker : chart.y_markers) {
      if (usable(marker.first, chart.log_y)) {
        y_low = std::min(y_low, marker.first);
        y_high = std::max(y_high, marker.first);
      }
    }
  }
  Axis x{x_low, x_high, chart.log_x, double(kLeft), double(w - kRight)};
  Axis y{y_low, y_high, chart.log_y, double(h - kBottom), double(kTop)};
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(kTop) + "\" width=\"" +
         std::to_string(w - kLeft - kRight) + "\" height=\"" + std::to_string(h - kTop - kBottom) +
         "\" class=\"frame\"/>";
  if (!std::isfinite(x_low)) {
    svg += "<text x=\"" + std::to_string(w / 2) + "\" y=\"" + std::to_string(h / 2) +
           "\" text-anchor=\"middle\" class=\"empty\">no data</text></svg>";
    return svg;
  }
  // A flat series still gets a visible range, and no line runs along the frame.
  for (Axis* axis : {&x, &y}) {
    if (axis->high <= axis->low) {
      const double pad = axis->log ? axis->low * 0.5 : std::max(1e-12, std::fabs(axis->low) * 0.1);
      axis->low -= pad;
      axis->high += axis->log ? axis->high : pad;
    }
  }
  if (y.log) {
    y.low /= 1.15;
    y.high *= 1.15;
  } else {
    const double pad = 0.05 * (y.high - y.low);
    y.low -= pad;
    y.high += pad;
  }

  // Grid and ticks.
  const auto x_ticks = chart.log_x ? log_ticks(x.low, x.high) : nice_ticks(x.low, x.high);
  const auto y_ticks = chart.log_y ? log_ticks(y.low, y.high) : nice_ticks(y.low, y.high);
  for (double t : x_ticks) {
    const std::string px = coordinate(x.to_pixel(t));
    svg += "<line x1=\"" + px + "\" x2=\"" + px + "\" y1=\"" + std::to_string(kTop) + "\" y2=\"" +
           std::to_string(h - kBottom) + "\" class=\"grid\"/>";
    svg += "<text x=\"" + px + "\" y=\"" + std::to_string(h - kBottom + 16) +
           "\" text-anchor=\"middle\" class=\"tick\">" + number(t) + "</text>";
  }
  for (double t : y_ticks) {
    const std::string py = coordinate(y.to_pixel(t));
    svg += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + std::to_string(w - kRight) +
           "\" y1=\"" + py + "\" y2=\"" + py + "\" class=\"grid\"/>";
    svg += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + py +
           "\" text-anchor=\"end\" dominant-baseline=\"middle\" class=\"tick\">" + number(t) +
           "</text>";
  }
  svg += "<text x=\"" + std::to_string((kLeft + w - kRight) / 2) + "\" y=\"" +
         std::to_string(h - 8) + "\" text-anchor=\"middle\" class=\"label\">" +
         xml_escape(chart.x_label + (chart.log_x ? " (log)" : "")) + "</text>";
  svg += "<text transform=\"translate(14 " + std::to_string((kTop + h - kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">" +
         xml_escape(chart.y_label + (chart.log_y ? " (log)" : "")) + "</text>";

  // A marker's label starts at its line; labels that would overlap an earlier one go a row down.
  std::vector<std::vector<std::pair<double, double>>> label_rows;  // taken [from, to] per row
  for (const auto& [value, label] : chart.x_markers) {
    if (!usable(value, chart.log_x) || value < x.low || value > x.high)
      continue;
    const double from = x.to_pixel(value);
    const double to = from + kMarkerCharWidth * double(label.size());
    size_t row = 0;
    for (; row < label_rows.size(); ++row) {
      bool free = true;
      for (const auto& [a, b] : label_rows[row])
        free = free && (to < a || from > b);
      if (free)
        break;
    }
    if (row == label_rows.size())
      label_rows.emplace_back();
    label_rows[row].push_back({from, to});
    const std::string px = coordinate(from);
    svg += "<line x1=\"" + px + "\" x2=\"" + px + "\" y1=\"" + std::to_string(kTop) + "\" y2=\"" +
           std::to_string(h - kBottom) + "\" class=\"marker\"/>";
    svg += "<text x=\"" + px + "\" y=\"" + std::to_string(kTop + 12 + 14 * int(row)) +
           "\" class=\"marker-label\">" + xml_escape(label) + "</text>";
  }

  for (const auto& [value, label] : chart.y_markers) {
    if (!usable(value, chart.log_y) || value < y.low || value > y.high)
      continue;
    const std::string py = coordinate(y.to_pixel(value));
    svg += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + std::to_string(w - kRight) +
           "\" y1=\"" + py + "\" y2=\"" + py + "\" class=\"marker\"/>";
    svg += "<text x=\"" + std::to_string(w - kRight - 4) + "\" y=\"" + py +
           "\" dy=\"-3\" text-anchor=\"end\" class=\"marker-label\">" + xml_escape(label) +
           "</text>";
  }

  // Series, thinned to a bounded number of points.
  for (const auto& s : chart.series) {
    std::vector<ChartPoint> kept;
    for (const auto& p : s.points) {
      if (usable(p.x, chart.log_x) && usable(p.y, chart.log_y))
        kept.push_back(p);
    }
    if (kept.empty())
      continue;
    const size_t stride = (kept.size() + kMaxPointsPerSeries - 1) / kMaxPointsPerSeries;
    std::string path;
    for (size_t i = 0; i < kept.size(); i += stride) {
      path += coordinate(x.to_pixel(kept[i].x)) + "," + coordinate(y.to_pixel(kept[i].y)) + " ";
    }
    if ((kept.size() - 1) % stride != 0) {  // always end at the last point
      path += coordinate(x.to_pixel(kept.back().x)) + "," + coordinate(y.to_pixel(kept.back().y));
    }
    svg += "<polyline fill=\"none\" stroke=\"" + xml_escape(s.color) +
           "\" stroke-width=\"1.5\" points=\"" + path + "\"><title>" + xml_escape(s.name) +
           "</title></polyline>";
    if (s.markers) {
      for (const auto& p : kept) {
        svg += "<circle cx=\"" + coordinate(x.to_pixel(p.x)) + "\" cy=\"" +
               coordinate(y.to_pixel(p.y)) + "\" r=\"3\" fill=\"" + xml_escape(s.color) +
               "\"><title>" + xml_escape(s.name) + ": " + number(p.y) + " at " + number(p.x) +
               "</title></circle>";
      }
    }
  }
  for (const auto& entry : legend) {
    const int ly = kTitle + kLegendRow * entry.row + 2;
    svg += "<rect x=\"" + std::to_string(entry.x) + "\" y=\"" + std::to_string(ly - 5) +
           "\" width=\"10\" height=\"10\" fill=\"" + xml_escape(entry.series->color) + "\"/>";
    svg += "<text x=\"" + std::to_string(entry.x + 14) + "\" y=\"" + std::to_string(ly) +
           "\" dominant-baseline=\"middle\" class=\"legend\">" + xml_escape(entry.series->name) +
           "</text>";
  }
  svg += "</svg>";
  return svg;
}

}  // namespace bigbatch
