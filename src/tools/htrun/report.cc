// htrun's report as text.
#include "htrun/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace htrun {

std::string report_text(const Report& r) {
  std::string out = fmt::format(
      "htrun report: {}; {} restart(s), {} incident(s), cordoned [{}], goodput {:.1f}% ({:.1f} s of {:.1f} s)\n",
      r.verdict, r.restarts, r.incidents.size(), fmt::join(r.cordoned, ","), 100 * r.goodput(), r.productive_s,
      r.wall_s);
  if (!r.readmitted.empty()) out += fmt::format("  readmitted as spares: [{}]\n", fmt::join(r.readmitted, ","));
  for (const Incident& i : r.incidents)
    out += fmt::format("  {:<11} rank {} node {}: detected in {:.2f} s, recovered in {}{}, {} step(s) lost\n",
                       ht::resilience::incident_kind_name(i.kind), i.rank, i.node, i.detection_latency_s,
                       i.recovery_s ? fmt::format("{:.1f} s", *i.recovery_s) : std::string("-"),
                       i.resume_tier.empty() ? std::string()
                                             : fmt::format(" (from {}, step {})", i.resume_tier, i.resumed_from),
                       i.steps_lost);
  return out;
}

}  // namespace htrun
