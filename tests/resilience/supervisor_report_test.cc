// htrun's report (ht/resilience/supervisor_report.h): written as docs/htrun.md
// ("The report") names the fields, read back to the same record, and a file
// that is not a report, or holds a field of another type, refused by name.
#include "ht/resilience/supervisor_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace ht::resilience {
namespace {

SupervisorReport two_incidents() {
  SupervisorReport r;
  r.verdict = "the job finished";
  r.exit_code = 0;
  r.wall_s = 12.5;
  r.productive_s = 10;
  r.restarts = 2;
  Incident crash;
  crash.kind = IncidentKind::kCrash;
  crash.rank = 3;
  crash.node = 1;
  crash.host = "h2";
  crash.exit_code = 137;
  crash.message = "killed by signal 9 \"KILL\"";
  crash.time_s = 4.25;
  crash.failed_at = 4.0;
  crash.detected_at = 4.1;
  crash.detection_latency_s = 0.1;
  crash.recovery_s = 1.2;
  crash.step_reached = 40;
  crash.steps_lost = 2;
  crash.resumed_from = 38;
  crash.resume_tier = "memory+peer";
  crash.health = {{.node = 1, .host = "h2", .healthy = false, .checked = false}};
  Incident cut;
  cut.kind = IncidentKind::kCommFailure;
  cut.suspect_nodes = {0, 2};
  cut.health = {{.node = 0, .host = "h1", .healthy = true}, {.node = 2, .host = "h3", .healthy = false}};
  r.incidents = {crash, cut};
  r.cordoned = {1, 2};
  r.active = {0, 3};
  r.readmitted = {1};
  r.launches = {{.launch = 0, .epoch = 1, .started_at = 0.1, .ack_s = 0.02},
                {.launch = 1,
                 .epoch = 2,
                 .started_at = 4.2,
                 .ack_s = 0.5,
                 .unacknowledged = {1},
                 .comm_wait = {{.node = 0, .comm_wait_s = 0.25}, {.node = 3, .comm_wait_s = 1.5}}}};
  r.agent_frames = 1234;
  r.agent_frames_dropped = 5;
  r.agent_handshake_timeouts = 1;
  return r;
}

TEST(SupervisorReport, AsDocumented) {
  const std::string text = format_supervisor_report(two_incidents());
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["verdict"], "the job finished");
  EXPECT_DOUBLE_EQ(j["goodput"].get<double>(), 0.8);
  EXPECT_EQ(j["cordoned_nodes"], nlohmann::json({1, 2}));
  EXPECT_EQ(j["readmitted_nodes"], nlohmann::json({1}));
  const nlohmann::json& crash = j["incidents"][0];
  EXPECT_EQ(crash["kind"], "crash");
  EXPECT_DOUBLE_EQ(crash["time"].get<double>(), 4.25);
  EXPECT_DOUBLE_EQ(crash["recovery_s"].get<double>(), 1.2);
  EXPECT_EQ(crash["resume_tier"], "memory+peer");
  EXPECT_EQ(crash["health"][0]["checked"], false);
  EXPECT_FALSE(j["incidents"][1].contains("recovery_s")) << "no relaunch trained: the field is left out";
  EXPECT_EQ(j["launches"][1]["unacknowledged"], nlohmann::json({1}));
  EXPECT_EQ(j["launches"][1]["comm_wait"][1]["node"], 3);
  EXPECT_DOUBLE_EQ(j["launches"][1]["comm_wait"][1]["comm_wait_s"].get<double>(), 1.5);
  EXPECT_EQ(j["agent_frames_dropped"], 5);
}

TEST(SupervisorReport, ReadsBackWhatItWrote) {
  const std::string text = format_supervisor_report(two_incidents());
  const SupervisorReport r = parse_supervisor_report(text);
  EXPECT_EQ(format_supervisor_report(r), text);
  ASSERT_EQ(r.incidents.size(), 2u);
  EXPECT_EQ(r.incidents[0].kind, IncidentKind::kCrash);
  EXPECT_EQ(r.incidents[0].recovery_s, 1.2);
  EXPECT_FALSE(r.incidents[1].recovery_s.has_value());
  EXPECT_EQ(r.incidents[1].suspect_nodes, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.incidents[1].health[1].host, "h3");
  EXPECT_EQ(r.launches[1].ack_s, 0.5);
  ASSERT_EQ(r.launches[1].comm_wait.size(), 2u);
  EXPECT_EQ(r.launches[1].comm_wait[0].comm_wait_s, 0.25);
  EXPECT_EQ(r.agent_handshake_timeouts, 1);
}

TEST(SupervisorReport, OlderReportsLackTheNewerFields) {
  // Before the node agents: no launches, no frame counts.
  const SupervisorReport r = parse_supervisor_report(
      R"({"verdict":"the job finished","exit_code":0,"wall_s":10,"productive_s":4,"goodput":0.4,"restarts":0,
          "incidents":[],"cordoned_nodes":[]})");
  EXPECT_DOUBLE_EQ(r.goodput(), 0.4);
  EXPECT_TRUE(r.launches.empty());
  EXPECT_EQ(r.agent_frames, 0);
}

void expect_refused(const std::string& text, const std::string& says) {
  try {
    parse_supervisor_report(text);
    FAIL() << "accepted: " << text;
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(SupervisorReport, RefusesWhatIsNotAReport) {
  expect_refused("", "not a JSON object");
  expect_refused(R"({"verdict":"the job finished","exit_)", "not a JSON object");  // cut short
  expect_refused("[1, 2]", "not a JSON object");
  expect_refused(R"({"type":"step","step":3})", "no field 'verdict'");
  expect_refused(R"({"verdict":"x","wall_s":"10","productive_s":4,"incidents":[]})", "'wall_s'");
  expect_refused(R"({"verdict":"x","wall_s":10,"productive_s":4,"incidents":{}})", "a list of objects");
  expect_refused(R"({"verdict":"x","wall_s":10,"productive_s":4,"incidents":[{"kind":"meteor"}]})", "meteor");
  expect_refused(R"({"verdict":"x","wall_s":10,"productive_s":4,"incidents":[{"kind":"crash","rank":"3"}]})",
                 "'incidents' item 0: field 'rank'");
  expect_refused(R"({"verdict":"x","wall_s":10,"productive_s":4,"incidents":[],"cordoned_nodes":[1,"h2"]})",
                 "cordoned_nodes");
  expect_refused(
      R"({"verdict":"x","wall_s":10,"productive_s":4,"incidents":[{"kind":"hang","health":[{"healthy":1}]}]})",
      "field 'healthy'");
}

}  // namespace
}  // namespace ht::resilience
