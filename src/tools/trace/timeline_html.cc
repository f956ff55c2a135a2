// ht-trace --html: the merged trace drawn as inline SVG.
#include "trace/timeline_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "report/svg_chart.h"

namespace ht::trace_tool {

namespace {

using Json = nlohmann::json;
using report::html_escape;

// A span's fill: what kind of time it is.
const char* fill(const std::string& cat, const std::string& name) {
  if (cat == "compute") return name.rfind("backward", 0) == 0 ? "#e8812f" : "#3d7cc9";
  if (cat == "wait") return "#e6b3b3";
  if (cat == "comm") return "#3a9a5b";
  if (cat == "comm-queued") return "#bfe3c9";
  return "#c9c9c9";  // the engine's phases
}

// A step of 1, 2 or 5 times a power of ten giving at most about 12 ticks.
double tick_step(double span_ms) {
  const double raw = span_ms / 12, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

}  // namespace

std::string timeline_html(const Json& merged) {
  // Rows: (pid, tid) in order, named; spans per row.
  std::map<int, std::string> process;
  std::map<std::pair<int, int>, std::string> rows;
  double end_us = 1;
  for (const Json& e : merged["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "M" && e.value("name", "") == "process_name") process[e.value("pid", 0)] = e["args"].value("name", "");
    if (ph == "M" && e.value("name", "") == "thread_name")
      rows[{e.value("pid", 0), e.value("tid", 0)}] = e["args"].value("name", "");
    if (ph == "X") end_us = std::max(end_us, e.value("ts", 0.0) + e.value("dur", 0.0));
  }
  const int left = 170, width = 1100, row_h = 16, band_gap = 10, axis_h = 28;
  std::map<std::pair<int, int>, int> row_y;
  int y = axis_h;
  int last_pid = -1;
  std::string labels;
  for (const auto& [key, name] : rows) {
    if (key.first != last_pid) {
      if (last_pid >= 0) y += band_gap;
      labels += fmt::format(R"(<text x="4" y="{}" class="rank">{}</text>)", y + 12, html_escape(process[key.first]));
      y += row_h;
      last_pid = key.first;
    }
    row_y[key] = y;
    labels += fmt::format(R"(<text x="14" y="{}" class="row">{}</text>)", y + 12, html_escape(name));
    y += row_h;
  }
  const double scale = width / end_us;
  std::string boxes;
  for (const Json& e : merged["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const auto at = row_y.find({e.value("pid", 0), e.value("tid", 0)});
    if (at == row_y.end()) continue;
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    const std::string name = e.value("name", ""), cat = e.value("cat", "");
    boxes += fmt::format(
        R"(<rect x="{:.1f}" y="{}" width="{:.2f}" height="{}" fill="{}" data-cat="{}"><title>{} ({}): {:.3f} ms at {:.3f} ms</title></rect>)",
        left + ts * scale, at->second + 2, std::max(0.5, dur * scale), row_h - 4, fill(cat, name), html_escape(cat),
        html_escape(name), html_escape(cat), dur / 1e3, ts / 1e3);
  }
  std::string axis;
  const double step_ms = tick_step(end_us / 1e3);
  for (double t = 0; t <= end_us / 1e3 + 1e-9; t += step_ms)
    axis += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" class="grid"/><text x="{0:.1f}" y="{3}" class="tick">{4:g} ms</text>)",
                        left + t * 1e3 * scale, axis_h - 4, y, axis_h - 8, t);
  const Json& other = merged["otherData"];
  const std::string steps = other.contains("steps") ? fmt::format("{}-{}", other["steps"][0].get<long long>(),
                                                                  other["steps"][1].get<long long>())
                                                    : "?";
  const std::string legend =
      R"(<span style="background:#3d7cc9">forward</span> <span style="background:#e8812f">backward</span> )"
      R"(<span style="background:#e6b3b3">waiting for a pipeline transfer</span> )"
      R"(<span style="background:#3a9a5b;color:#fff">collective or transfer running</span> )"
      R"(<span style="background:#bfe3c9">queued</span> <span style="background:#c9c9c9">engine phase</span>)";
  return fmt::format(R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>hypertrain trace, steps {0}</title>
<style>body{{font:13px sans-serif;margin:16px}} .rank{{font-weight:bold;font-size:12px}} .row{{font-size:11px;fill:#444}}
.tick{{font-size:10px;fill:#666}} .grid{{stroke:#eee}} .legend span{{padding:1px 6px;margin-right:4px}}</style></head>
<body><h1 style="font-size:17px">Timeline of steps {0}: {1} rank(s)</h1>
<p class="legend">{2}</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{3}" height="{4}">{5}{6}{7}</svg>
<p>Time 0: the end of a world barrier before the first traced step. Hover over a box for its name and length.</p>
</body></html>
)",
                     steps, process.size(), legend, left + width + 20, y + 10, axis, labels, boxes);
}

}  // namespace ht::trace_tool
