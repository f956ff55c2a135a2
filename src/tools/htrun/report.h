// htrun's report: every incident (kind, rank and node, detection latency,
// recovery time to the first resumed step, steps lost), the cordoned nodes,
// restarts and goodput = productive training time / wall time; printed and
// written as JSON to <run-dir>/htrun_report.json. Productive time and
// recoveries come from the ranks' step records (metrics.jsonl), not from
// sampled heartbeats (docs/htrun.md, "The report"). The records and their
// JSON are the run protocol's (ht/resilience/supervisor_report.h).
#pragma once

#include <string>

#include "ht/resilience/supervisor_report.h"

namespace htrun {

using ht::resilience::Incident;
using ht::resilience::LaunchRecord;
using ht::resilience::NodeHealth;
using Report = ht::resilience::SupervisorReport;

/// The summary htrun prints at the end.
std::string report_text(const Report& report);

}  // namespace htrun
