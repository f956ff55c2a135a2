// ht-report's page: one self-contained HTML file (inline CSS, inline SVG, a
// few lines of inline script; nothing fetched) from a RunDir.
#pragma once

#include <string>

#include "report/run_dir.h"

namespace ht::report {

struct PageOptions {
  /// Peak dense TFLOP/s of one rank's device; 0: MFU is not computed (the page says so).
  double peak_tflops = 0;
};

/// The whole page. Every chart's points are SVG circles with data attributes
/// (`g.points[data-series=loss] > circle[data-step][data-loss]`); an inline
/// script writes the count per series into `#rendered` once the page has loaded.
std::string render_page(const RunDir& run, const PageOptions& options);

/// Ranks in a mesh written as in the run record ("pp1 x dp3 x tp1" -> 3); 0 when unreadable.
int mesh_world_size(const std::string& mesh);

}  // namespace ht::report
