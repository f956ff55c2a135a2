// htrun's report as JSON and as text.
#include "htrun/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace htrun {

nlohmann::json Report::to_json() const {
  nlohmann::json incidents_json = nlohmann::json::array();
  for (const Incident& i : incidents) {
    nlohmann::json health = nlohmann::json::array();
    for (const NodeHealth& h : i.health) health.push_back({{"node", h.node}, {"host", h.host}, {"healthy", h.healthy}, {"checked", h.checked}});
    nlohmann::json j{{"kind", ht::resilience::incident_kind_name(i.kind)},
                     {"rank", i.rank},
                     {"node", i.node},
                     {"host", i.host},
                     {"exit_code", i.exit_code},
                     {"message", i.message},
                     {"time", i.time_s},
                     {"failed_at", i.failed_at},
                     {"detected_at", i.detected_at},
                     {"suspect_nodes", i.suspect_nodes},
                     {"detection_latency_s", i.detection_latency_s},
                     {"step_reached", i.step_reached},
                     {"steps_lost", i.steps_lost},
                     {"resumed_from", i.resumed_from},
                     {"resume_tier", i.resume_tier},
                     {"health", std::move(health)}};
    if (i.recovery_s) j["recovery_s"] = *i.recovery_s;
    incidents_json.push_back(std::move(j));
  }
  nlohmann::json launches_json = nlohmann::json::array();
  for (const LaunchRecord& l : launches)
    launches_json.push_back({{"launch", l.launch},
                             {"epoch", l.epoch},
                             {"started_at", l.started_at},
                             {"ack_s", l.ack_s},
                             {"unacknowledged", l.unacknowledged}});
  return {{"verdict", verdict},
          {"exit_code", exit_code},
          {"wall_s", wall_s},
          {"productive_s", productive_s},
          {"goodput", goodput()},
          {"restarts", restarts},
          {"incidents", incidents_json},
          {"cordoned_nodes", cordoned},
          {"active_nodes", active},
          {"spares_left", spares_left},
          {"readmitted_nodes", readmitted},
          {"launches", launches_json},
          {"agent_frames", agent_frames},
          {"agent_frames_dropped", agent_frames_dropped},
          {"agent_handshake_timeouts", agent_handshake_timeouts}};
}

std::string Report::text() const {
  std::string out = fmt::format(
      "htrun report: {}; {} restart(s), {} incident(s), cordoned [{}], goodput {:.1f}% ({:.1f} s of {:.1f} s)\n",
      verdict, restarts, incidents.size(), fmt::join(cordoned, ","), 100 * goodput(), productive_s, wall_s);
  if (!readmitted.empty()) out += fmt::format("  readmitted as spares: [{}]\n", fmt::join(readmitted, ","));
  for (const Incident& i : incidents)
    out += fmt::format("  {:<11} rank {} node {}: detected in {:.2f} s, recovered in {}{}, {} step(s) lost\n",
                       ht::resilience::incident_kind_name(i.kind),
                       i.rank, i.node, i.detection_latency_s,
                       i.recovery_s ? fmt::format("{:.1f} s", *i.recovery_s) : std::string("-"),
                       i.resume_tier.empty() ? std::string()
                                             : fmt::format(" (from {}, step {})", i.resume_tier, i.resumed_from),
                       i.steps_lost);
  return out;
}

}  // namespace htrun
