// Inline SVG charts for ht-report: a line chart whose every data point is an
// element carrying its values (`<circle data-series="loss" data-step="12"
// data-loss="5.2">`), so that a test or a reader's script can count and read
// them, and a timeline of htrun's incidents.
#pragma once

#include <string>
#include <vector>

namespace ht::report {

struct Series {
  std::string name{};                 // data-series, also the legend
  std::string color{};                // CSS colour
  std::string x_key = "step", y_key;  // data attribute names: data-<x_key>, data-<y_key>
  std::vector<double> x{}, y{};       // same length; a non-finite y is drawn on the top edge, marked
  bool dashed = false;
};

struct ChartOptions {
  std::string id{}, title{}, x_label{}, y_label{};
  int width = 880, height = 240;
  bool log_y = false;
  /// Vertical lines at these x values (checkpoints), labelled in the legend.
  std::vector<double> x_marks{};
  std::string x_marks_label{};
};

/// One chart as an `<svg>` element. Points with non-finite x are left out.
std::string line_chart(const ChartOptions& options, const std::vector<Series>& series);

/// An incident on htrun's clock (seconds since htrun started).
struct TimelineEvent {
  std::string kind{}, label{};
  double time_s = 0, detection_s = 0;
  double recovery_s = -1;  // < 0: never recovered
};

/// htrun's run from 0 to wall_s: each incident as a failure mark, a detection
/// bar (failure to htrun acting) and a recovery bar (to the first step after it).
std::string timeline_chart(const std::string& id, double wall_s, const std::vector<TimelineEvent>& events);

/// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string html_escape(const std::string& text);

}  // namespace ht::report
