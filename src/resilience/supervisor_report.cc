// htrun_report.json's writer and reader (ht/resilience/supervisor_report.h):
// the only place that spells the report's fields out.
#include "ht/resilience/supervisor_report.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ht/core/error.h"

#include "resilience/json_record.h"

namespace ht::resilience {
namespace {

using detail::FieldReader;
using detail::json;

json incident_json(const Incident& i) {
  json health = json::array();
  for (const NodeHealth& h : i.health)
    health.push_back({{"node", h.node}, {"host", h.host}, {"healthy", h.healthy}, {"checked", h.checked}});
  json j{{"kind", incident_kind_name(i.kind)},
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
  return j;
}

void read_incident(FieldReader& f, Incident& i) {
  std::string kind;
  f.text("kind", kind);
  if (const auto k = parse_incident_kind(kind)) i.kind = *k;
  else f.refuse_because(fmt::format("field 'kind' holds \"{:.40}\", not an incident kind the protocol names", kind));
  f.integer("rank", i.rank);
  f.integer("node", i.node);
  f.text("host", i.host);
  f.integer("exit_code", i.exit_code);
  f.text("message", i.message);
  f.number("time", i.time_s);
  f.number("failed_at", i.failed_at);
  f.number("detected_at", i.detected_at);
  f.integers("suspect_nodes", i.suspect_nodes);
  f.number("detection_latency_s", i.detection_latency_s);
  if (f.has("recovery_s")) f.number("recovery_s", i.recovery_s.emplace());
  f.integer("step_reached", i.step_reached);
  f.integer("steps_lost", i.steps_lost);
  f.integer("resumed_from", i.resumed_from);
  f.text("resume_tier", i.resume_tier);
  f.objects("health", [&](FieldReader& h) {
    NodeHealth n;
    h.integer("node", n.node);
    h.text("host", n.host);
    h.flag("healthy", n.healthy);
    h.flag("checked", n.checked);
    i.health.push_back(std::move(n));
  });
}

}  // namespace

std::string format_supervisor_report(const SupervisorReport& r) {
  json incidents = json::array();
  for (const Incident& i : r.incidents) incidents.push_back(incident_json(i));
  json launches = json::array();
  for (const LaunchRecord& l : r.launches) {
    json waits = json::array();
    for (const NodeCommWait& w : l.comm_wait) waits.push_back({{"node", w.node}, {"comm_wait_s", w.comm_wait_s}});
    launches.push_back({{"launch", l.launch},
                        {"epoch", l.epoch},
                        {"started_at", l.started_at},
                        {"ack_s", l.ack_s},
                        {"unacknowledged", l.unacknowledged},
                        {"comm_wait", std::move(waits)}});
  }
  const json j{{"verdict", r.verdict},
               {"exit_code", r.exit_code},
               {"wall_s", r.wall_s},
               {"productive_s", r.productive_s},
               {"goodput", r.goodput()},
               {"restarts", r.restarts},
               {"incidents", std::move(incidents)},
               {"cordoned_nodes", r.cordoned},
               {"active_nodes", r.active},
               {"spares_left", r.spares_left},
               {"readmitted_nodes", r.readmitted},
               {"launches", std::move(launches)},
               {"agent_frames", r.agent_frames},
               {"agent_frames_dropped", r.agent_frames_dropped},
               {"agent_handshake_timeouts", r.agent_handshake_timeouts}};
  return j.dump(1, ' ', false, json::error_handler_t::replace);
}

SupervisorReport parse_supervisor_report(std::string_view text) {
  const std::optional<json> j = detail::parse_object(text);
  if (!j) throw ProtocolError("not a JSON object (htrun writes the report whole when a run ends)");
  for (const char* key : {"verdict", "wall_s", "productive_s", "incidents"})
    if (!j->contains(key)) throw ProtocolError(fmt::format("no field '{}': not an htrun report", key));
  SupervisorReport r;
  FieldReader f(*j);
  f.text("verdict", r.verdict);
  f.integer("exit_code", r.exit_code);
  f.number("wall_s", r.wall_s);
  f.number("productive_s", r.productive_s);
  f.integer("restarts", r.restarts);
  f.objects("incidents", [&](FieldReader& i) { read_incident(i, r.incidents.emplace_back()); });
  f.integers("cordoned_nodes", r.cordoned);
  f.integers("active_nodes", r.active);
  f.integers("spares_left", r.spares_left);
  f.integers("readmitted_nodes", r.readmitted);
  f.objects("launches", [&](FieldReader& l) {
    LaunchRecord& launch = r.launches.emplace_back();
    l.integer("launch", launch.launch);
    l.integer("epoch", launch.epoch);
    l.number("started_at", launch.started_at);
    l.number("ack_s", launch.ack_s);
    l.integers("unacknowledged", launch.unacknowledged);
    l.objects("comm_wait", [&](FieldReader& w) {
      NodeCommWait& wait = launch.comm_wait.emplace_back();
      w.integer("node", wait.node);
      w.number("comm_wait_s", wait.comm_wait_s);
    });
  });
  f.integer("agent_frames", r.agent_frames);
  f.integer("agent_frames_dropped", r.agent_frames_dropped);
  f.integer("agent_handshake_timeouts", r.agent_handshake_timeouts);
  if (!f.bad().empty()) throw ProtocolError(f.bad());
  return r;
}

SupervisorReport read_supervisor_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(ErrorKind::kIo, fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_supervisor_report(text.str());
}

}  // namespace ht::resilience
