// ht-trace --html: the merged trace as one self-contained HTML page (inline
// SVG, no script, no network): a band per rank, a row per engine phase,
// computation and communicator, a box per span (hover for its name and
// length), on one time axis in milliseconds.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ht::trace_tool {

/// The page of `merged` (merge_traces' document).
std::string timeline_html(const nlohmann::json& merged);

}  // namespace ht::trace_tool
