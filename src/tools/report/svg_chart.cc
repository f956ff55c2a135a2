// SVG for ht-report's charts: axes with round ticks, one polyline and one
// circle per point for each series, and the incident timeline.
#include "report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ht::report {
namespace {

constexpr int kLeft = 64, kRight = 16, kTop = 28, kBottom = 36;  // plot margins, px

// Round tick values covering [lo, hi]: steps of 1, 2 or 5 x 10^k, about 5 of them.
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string num(double v) {
  return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string(std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

struct Scale {
  double lo, hi, px0, px1;
  bool log = false;
  double operator()(double v) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi, x = log ? std::log10(v) : v;
    return px0 + (x - a) / (b - a) * (px1 - px0);
  }
};

// The range of the finite values, widened when empty or flat.
std::pair<double, double> range(const std::vector<const std::vector<double>*>& values, bool positive_only) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto* v : values)
    for (double x : *v)
      if (std::isfinite(x) && (!positive_only || x > 0)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (lo > hi) return {positive_only ? 1 : 0, positive_only ? 10 : 1};
  if (lo == hi)
    return positive_only ? std::pair{lo / 2, hi * 2} : lo == 0 ? std::pair{0.0, 1.0} : std::pair{lo - 1, hi + 1};
  return {lo, hi};
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) switch (c) {
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
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  return out;
}

namespace {

// The grid with its tick labels, the frame, the axis labels and the marks.
std::string chart_axes(const ChartOptions& o, const Scale& sx, const Scale& sy, double x_lo, double x_hi, double y_lo,
                       double y_hi) {
  std::string svg;
  for (double t : ticks(x_lo, x_hi))
    svg += fmt::format(
        R"(<line class="grid" x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}"/><text class="tick" x="{0:.1f}" y="{3}" text-anchor="middle">{4}</text>)"
        "\n",
        sx(t), kTop, o.height - kBottom, o.height - kBottom + 14, num(t));
  std::vector<double> y_ticks;
  if (o.log_y)
    for (double d = std::pow(10, std::floor(std::log10(y_lo))); d <= y_hi; d *= 10) {
      if (d >= y_lo) y_ticks.push_back(d);
    }
  else
    y_ticks = ticks(y_lo, y_hi);
  for (double t : y_ticks)
    svg += fmt::format(
        R"(<line class="grid" x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}"/><text class="tick" x="{3}" y="{4:.1f}" text-anchor="end">{5}</text>)"
        "\n",
        kLeft, o.width - kRight, sy(t), kLeft - 4, sy(t) + 4, num(t));
  svg += fmt::format(R"(<rect class="frame" x="{}" y="{}" width="{}" height="{}"/>)"
                     "\n",
                     kLeft, kTop, o.width - kLeft - kRight, o.height - kTop - kBottom);
  svg += fmt::format(R"(<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>)"
                     "\n",
                     (kLeft + o.width - kRight) / 2, o.height - 4, html_escape(o.x_label));
  svg +=
      fmt::format(R"svg(<text class="axis" transform="translate(12,{}) rotate(-90)" text-anchor="middle">{}</text>)svg"
                  "\n",
                  (kTop + o.height - kBottom) / 2, html_escape(o.y_label));
  for (double m : o.x_marks)
    if (std::isfinite(m))
      svg +=
          fmt::format(R"(<line class="mark" data-{}="{}" x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}"/>)"
                      "\n",
                      o.x_marks_label.empty() ? "mark" : "checkpoint", num(m), sx(m), sx(m), kTop, o.height - kBottom);
  return svg;
}

// The legend, right-aligned at the top: the series, then the marks' label.
std::string chart_legend(const ChartOptions& o, const std::vector<Series>& series) {
  std::string svg;
  int legend_x = o.width - kRight;
  for (std::size_t k = series.size(); k-- > 0;) {
    const Series& s = series[k];
    const std::string name = html_escape(s.name);
    legend_x -= 12 + 7 * static_cast<int>(s.name.size()) + 16;
    svg += fmt::format(
        R"(<g class="legend"><rect x="{}" y="8" width="12" height="4" fill="{}"/><text x="{}" y="14">{}</text></g>)"
        "\n",
        legend_x, s.color, legend_x + 16, name);
  }
  if (!o.x_marks.empty() && !o.x_marks_label.empty())
    svg += fmt::format(
        R"(<g class="legend"><line class="mark" x1="{0}" x2="{0}" y1="4" y2="16"/><text x="{1}" y="14">{2}</text></g>)"
        "\n",
        legend_x - 24 - 7 * static_cast<int>(o.x_marks_label.size()),
        legend_x - 20 - 7 * static_cast<int>(o.x_marks_label.size()), html_escape(o.x_marks_label));
  return svg;
}

// One series: the line through its finite points, then every point as a circle.
std::string series_svg(const ChartOptions& o, const Series& s, const Scale& sx, const Scale& sy) {
  std::string svg;
  // One polyline per run of increasing x: a series that goes back (a
  // relaunch redoing steps) is not joined across the jump.
  std::string points;
  const auto flush = [&] {
    if (!points.empty())
      svg += fmt::format(R"(<polyline class="line" data-series="{}" fill="none" stroke="{}"{} points="{}"/>)"
                         "\n",
                         html_escape(s.name), s.color, s.dashed ? R"( stroke-dasharray="5 3")" : "", points);
    points.clear();
  };
  for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (i > 0 && s.x[i] <= s.x[i - 1]) flush();
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && (!o.log_y || s.y[i] > 0))
      points += fmt::format("{:.1f},{:.1f} ", sx(s.x[i]), sy(s.y[i]));
  }
  flush();
  svg += fmt::format(R"(<g class="points" data-series="{}" fill="{}">)", html_escape(s.name), s.color);
  for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i])) continue;
    const bool drawable = std::isfinite(s.y[i]) && (!o.log_y || s.y[i] > 0);
    svg += fmt::format(
        R"(<circle class="pt{}" data-{}="{}" data-{}="{}" cx="{:.1f}" cy="{:.1f}" r="{}"><title>{} {}: {} {}</title></circle>)",
        drawable ? "" : " nonfinite", s.x_key, num(s.x[i]), s.y_key, num(s.y[i]), sx(s.x[i]),
        drawable ? sy(s.y[i]) : double(kTop),
        !drawable          ? "3"
        : s.x.size() > 150 ? "1.1"
                           : "1.8",
        s.x_key, num(s.x[i]), html_escape(s.name), num(s.y[i]));
  }
  svg += "</g>\n";
  return svg;
}

}  // namespace

std::string line_chart(const ChartOptions& o, const std::vector<Series>& series) {
  std::vector<const std::vector<double>*> xs, ys;
  for (const Series& s : series) xs.push_back(&s.x), ys.push_back(&s.y);
  auto [x_lo, x_hi] = range(xs, false);
  auto [y_lo, y_hi] = range(ys, o.log_y);
  if (!o.log_y) {  // a margin of 5% so that the extreme points are not on the frame
    const double pad = (y_hi - y_lo) * 0.05;
    y_lo -= pad, y_hi += pad;
  }
  const Scale sx{x_lo, x_hi, double(kLeft), double(o.width - kRight)};
  const Scale sy{y_lo, y_hi, double(o.height - kBottom), double(kTop), o.log_y};

  std::string svg = fmt::format(
      R"(<svg id="{}" class="chart" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">)"
      "\n",
      html_escape(o.id), o.width, o.height, o.width, o.height, html_escape(o.title));
  svg += fmt::format(R"(<text class="title" x="{}" y="16">{}</text>)"
                     "\n",
                     kLeft, html_escape(o.title));
  svg += chart_axes(o, sx, sy, x_lo, x_hi, y_lo, y_hi);
  svg += chart_legend(o, series);
  for (const Series& s : series) svg += series_svg(o, s, sx, sy);
  return svg + "</svg>\n";
}

std::string timeline_chart(const std::string& id, double wall_s, const std::vector<TimelineEvent>& events) {
  const int width = 880, row = 22, height = kTop + row * std::max<int>(1, events.size()) + kBottom;
  const double end = std::max({wall_s, 1e-3});
  const Scale sx{0, end, double(kLeft + 60), double(width - kRight)};
  std::string svg = fmt::format(
      R"(<svg id="{}" class="chart timeline" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="incidents on htrun's clock">)"
      "\n",
      html_escape(id), width, height, width, height);
  svg += fmt::format(
      R"(<text class="title" x="{}" y="16">Incidents on htrun's clock (s since htrun started)</text>)"
      R"(<g class="legend"><rect x="560" y="8" width="10" height="8" class="detect"/><text x="574" y="16">detection</text>)"
      R"(<rect x="650" y="8" width="10" height="8" class="recover"/><text x="664" y="16">recovery (to the first step after it)</text></g>)"
      "\n",
      kLeft);
  for (double t : ticks(0, end))
    svg += fmt::format(
        R"(<line class="grid" x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}"/><text class="tick" x="{0:.1f}" y="{3}" text-anchor="middle">{4}</text>)"
        "\n",
        sx(t), kTop, height - kBottom, height - kBottom + 14, num(t));
  svg += fmt::format(R"(<rect class="frame" x="{}" y="{}" width="{}" height="{}"/>)"
                     "\n",
                     sx(0), kTop, sx(end) - sx(0), height - kTop - kBottom);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TimelineEvent& e = events[i];
    const double y = kTop + row * i + 4, h = row - 8;
    const double t_detect = e.time_s + e.detection_s;
    svg += fmt::format(
        R"(<g class="incident" data-kind="{}" data-time-s="{}" data-detection-s="{}" data-recovery-s="{}">)",
        html_escape(e.kind), num(e.time_s), num(e.detection_s),
        e.recovery_s < 0 ? std::string("none") : num(e.recovery_s));
    svg += fmt::format(R"(<text class="tick" x="{}" y="{:.1f}">{}</text>)", kLeft - 56, y + h - 3, html_escape(e.kind));
    svg += fmt::format(R"(<rect class="detect" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>)", sx(e.time_s),
                       y, std::max(1.5, sx(t_detect) - sx(e.time_s)), h);
    if (e.recovery_s >= 0)
      svg += fmt::format(R"(<rect class="recover" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}"/>)",
                         sx(t_detect), y, std::max(1.5, sx(t_detect + e.recovery_s) - sx(t_detect)), h);
    svg += fmt::format(R"(<line class="failure" x1="{0:.1f}" x2="{0:.1f}" y1="{1:.1f}" y2="{2:.1f}"/>)", sx(e.time_s),
                       y - 2, y + h + 2);
    // The label right of the bars where it fits (about 6 px a character), else left of the failure.
    const double label_px = 6.0 * static_cast<double>(e.label.size());
    const double right = sx(t_detect + std::max(0.0, e.recovery_s)) + 4;
    const bool fits_right = right + label_px <= width - kRight;
    svg += fmt::format(R"(<text class="note" x="{:.1f}" y="{:.1f}" text-anchor="{}">{}</text>)",
                       fits_right ? right : std::max(sx(e.time_s) - 4, double(kLeft + 60)), y + h - 3,
                       fits_right ? "start" : "end", html_escape(e.label));
    svg += fmt::format("<title>{}</title></g>\n", html_escape(e.kind + ": " + e.label));
  }
  svg += fmt::format(
      R"(<text class="axis" x="{}" y="{}" text-anchor="middle">seconds since htrun started (wall {:.1f} s)</text>)"
      "\n",
      (kLeft + width) / 2, height - 4, wall_s);
  return svg + "</svg>\n";
}

}  // namespace ht::report
