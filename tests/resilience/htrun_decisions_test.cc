// htrun's decisions (src/tools/htrun/decisions.h) on hand-made watches: who
// is blamed and when it failed for each way a launch ends, what the watch
// declares by itself, which nodes are health-checked, the back-off; and the
// supervisor's back-off on its own clock, with a launcher that always fails.
#include "htrun/decisions.h"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "htrun/child_process.h"
#include "htrun/sim_cluster.h"
#include "htrun/supervisor.h"

namespace htrun {
namespace {

namespace fs = std::filesystem;
using ht::resilience::ExitKind;
using ht::resilience::Heartbeat;
using ht::resilience::Phase;

// Two nodes of two slots: ranks 0 and 1 on node 0 (host h0), 2 and 3 on node 1 (h1).
Placement two_nodes() { return {{{0, "h0"}, {1, "h1"}}, 2}; }

Heartbeat beat(int rank, double time_s, double progress_s, std::int64_t step = 5, Phase phase = Phase::kData) {
  return {.rank = rank,
          .host = rank < 2 ? "h0" : "h1",
          .pid = 100 + rank,
          .step = step,
          .phase = phase,
          .time_ms = std::llround(time_s * 1000),
          .progress_ms = std::llround(progress_s * 1000),
          .epoch = 1};
}

ExitRecord record(int rank, ExitKind kind, double time_s, std::vector<int> blamed = {}, std::string message = "") {
  return {.rank = rank,
          .code = 0,
          .kind = kind,
          .step = 5,
          .phase = Phase::kGradientReduction,
          .time_ms = std::llround(time_s * 1000),
          .message = std::move(message),
          .blamed_ranks = std::move(blamed),
          .epoch = 1};
}

// What the agents of `placement`'s nodes would send of `beats` (each its
// node's summary, made by the agents' own RankBoard), heard at `heard_s`.
Hosts hosts_of(const std::map<int, Heartbeat>& beats, const Placement& placement = two_nodes(), double heard_s = 100) {
  Hosts hosts(placement.active.size());
  for (std::size_t n = 0; n < hosts.size(); ++n) {
    RankBoard board;
    board.launch(1, int(n) * placement.slots, placement.slots);
    for (const auto& [rank, h] : beats)
      if (board.beat(h)) board.set_live(rank, true);
    hosts[n].summary = board.summary(100000);
    hosts[n].summarized = true;
    hosts[n].heard_s = heard_s;
  }
  return hosts;
}

// Every rank of two_nodes() beating at `time_s`, its last progress at `progress_s`.
std::map<int, Heartbeat> every_rank(double time_s, double progress_s) {
  std::map<int, Heartbeat> beats;
  for (int r = 0; r < 4; ++r) beats[r] = beat(r, time_s, progress_s);
  return beats;
}

// A launch that ended at t = 100 s (the launcher exited 1); it resumed from
// step 4 and reached step 6. The tests give its ranks' beats to judge().
Watch ended() {
  Watch w;
  w.exit_code = 1;
  w.detected_at = 100;
  w.resume_step = 4;
  w.reached = 6;
  w.checkpoint_step = 4;
  return w;
}

Incident judge(Watch w, const std::map<int, Heartbeat>& beats) {
  w.hosts = hosts_of(beats);
  return classify(w, two_nodes(), /*comm_timeout_s=*/10, "run/htrun_job.log");
}

TEST(HtrunClassify, CrashNamedByTheLauncher) {
  Watch w = ended();
  auto beats = every_rank(99, 98);
  w.exit_code = 137;
  w.dead_rank = {.rank = 3, .host = "", .time_s = 99.8};
  beats[2] = beat(2, 99.4, 98);
  beats[3] = beat(3, 99.1, 98);
  const Incident i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kCrash);
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.node, 1);
  EXPECT_EQ(i.host, "h1");
  EXPECT_DOUBLE_EQ(i.failed_at, 99.4) << "the newest beat of the node's ranks";
  EXPECT_NEAR(i.detection_latency_s, 0.6, 1e-9);
  EXPECT_EQ(i.step_reached, 6);
  EXPECT_EQ(i.steps_lost, 2);
  EXPECT_EQ(i.exit_code, 137);
  // No beat from that node: the launcher's line is the failure time.
  beats.erase(2), beats.erase(3);
  EXPECT_DOUBLE_EQ(judge(w, beats).failed_at, 99.8);
}

TEST(HtrunClassify, HostLostBeforeARankKilledElsewhereBlamesTheHost) {
  // srun: the node of h1 failed, then srun ended rank 0's task.
  Watch w = ended();
  auto beats = every_rank(99, 98);
  w.lost_host = {.rank = -1, .host = "h1", .time_s = 99.5};
  w.dead_rank = {.rank = 0, .host = "", .time_s = 99.6};
  beats[2] = beat(2, 97, 96);
  beats[3] = beat(3, 97.5, 96);
  Incident i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kHostLost);
  EXPECT_EQ(i.rank, 2) << "the host's first rank";
  EXPECT_EQ(i.node, 1);
  EXPECT_EQ(i.message, "the launcher lost host h1");
  EXPECT_DOUBLE_EQ(i.failed_at, 97.5);
  // Reported after the rank was killed: the crash is the cause.
  w.lost_host.time_s = 99.7;
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kCrash);
  EXPECT_EQ(i.rank, 0);
  // The killed rank's own host lost: the rank is named.
  w.lost_host = {.rank = -1, .host = "h0", .time_s = 99.5};
  EXPECT_EQ(judge(w, beats).kind, IncidentKind::kCrash);
  // A lost host alone; named by its short name.
  w.dead_rank = {};
  w.lost_host = {.rank = -1, .host = "h1", .time_s = 99.5};
  Placement long_names{{{0, "h0.cluster"}, {1, "h1.cluster"}}, 2};
  w.hosts = hosts_of(beats, long_names);
  i = classify(w, long_names, 10, "log");
  EXPECT_EQ(i.kind, IncidentKind::kHostLost);
  EXPECT_EQ(i.node, 1);
  // A host no node is on: no rank, the launcher's line the failure time.
  w.lost_host.host = "elsewhere";
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kHostLost);
  EXPECT_EQ(i.rank, -1);
  EXPECT_DOUBLE_EQ(i.failed_at, 99.5);
}

TEST(HtrunClassify, RanksThatOutlivedTheLauncher) {
  Watch w = ended();
  auto beats = every_rank(99, 98);
  w.orphans = {1};  // node 1: ranks 2 and 3
  beats[2] = beat(2, 101, 95.5);
  beats[3] = beat(3, 101, 96.25);
  const Incident i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kHostLost);
  EXPECT_EQ(i.rank, 2);
  EXPECT_EQ(i.node, 1);
  EXPECT_NE(i.message.find("the ranks of node 1 (h1) beat on after the launcher was gone"), std::string::npos)
      << i.message;
  EXPECT_DOUBLE_EQ(i.failed_at, 96.25) << "their last progress: when the cut caught them";
}

TEST(HtrunClassify, CommunicationFailures) {
  // A rank named by peers it did not name: the culprit, failed at its node's last beat.
  Watch w = ended();
  auto beats = every_rank(99, 98);
  w.exits = {record(0, ExitKind::kCommFailure, 99.2, {3}, "all_reduce timed out"),
             record(1, ExitKind::kCommFailure, 99.3, {3})};
  beats[2] = beat(2, 97, 97);
  beats[3] = beat(3, 97.2, 97.2);
  Incident i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kCommFailure);
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.node, 1);
  EXPECT_EQ(i.message, "all_reduce timed out");
  EXPECT_DOUBLE_EQ(i.failed_at, 97.2);
  EXPECT_TRUE(i.suspect_nodes.empty());
  // Still beating, without progress for more than half the ranks' timeout: a hang.
  beats[3] = beat(3, 99.5, 90);
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kHang);
  EXPECT_EQ(i.rank, 3);
  EXPECT_DOUBLE_EQ(i.failed_at, 99.5);
  // Ranks that name each other (a link cut): no culprit, both nodes suspects.
  w = ended();
  beats = every_rank(99, 98);
  w.exits = {record(0, ExitKind::kCommFailure, 99.2, {2}), record(2, ExitKind::kCommFailure, 99.4, {0})};
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kCommFailure);
  EXPECT_EQ(i.rank, -1);
  EXPECT_EQ(i.node, -1);
  EXPECT_EQ(i.suspect_nodes, (std::vector<int>{1, 0}));
  EXPECT_DOUBLE_EQ(i.failed_at, 99.2) << "the first record";
  const auto checked = nodes_to_check(i, two_nodes().active);
  ASSERT_EQ(checked.size(), 2u);
  EXPECT_EQ(checked[0].id, 0);
  EXPECT_EQ(checked[1].id, 1);
}

TEST(HtrunClassify, ExitRecordsOfTheirOwnFailure) {
  Watch w = ended();
  auto beats = every_rank(99, 98);
  // A peer's communication failure first, then the rank that diverged: the divergence is the cause.
  w.exits = {record(2, ExitKind::kCommFailure, 99.0, {1}), record(1, ExitKind::kDivergence, 99.1, {}, "loss nan")};
  Incident i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kDivergence);
  EXPECT_EQ(i.rank, 1);
  EXPECT_EQ(i.message, "loss nan");
  EXPECT_DOUBLE_EQ(i.failed_at, 99.1);
  // A straggler named by the record's writer.
  w.exits = {record(0, ExitKind::kStraggler, 99.0, {3})};
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kStraggler);
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.node, 1);
  // Ranks preempted by someone else (Slurm signalled them).
  w.exits = {record(0, ExitKind::kPreempted, 99.0), record(1, ExitKind::kPreempted, 99.0)};
  EXPECT_EQ(judge(w, beats).kind, IncidentKind::kPreemption);
  // The watch's own finding comes before any record.
  w.kind = IncidentKind::kHang;
  w.failed_rank = 2;
  w.failed_at = 90;
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kHang);
  EXPECT_EQ(i.rank, 2);
  EXPECT_DOUBLE_EQ(i.detection_latency_s, 10);
}

TEST(HtrunClassify, NothingSaidIsAFailure) {
  Watch w = ended();
  auto beats = every_rank(99, 98);
  Incident i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kFailure);
  EXPECT_EQ(i.rank, -1);
  EXPECT_EQ(i.message, "the launcher exited 1 and no rank said why (see run/htrun_job.log)");
  EXPECT_DOUBLE_EQ(i.failed_at, 100) << "nothing tells: the detection";
  EXPECT_DOUBLE_EQ(i.detection_latency_s, 0);
  // A node whose beats stopped a second or more before the other's.
  beats[2] = beat(2, 97.5, 97);
  beats[3] = beat(3, 97.9, 97);
  i = judge(w, beats);
  EXPECT_EQ(i.kind, IncidentKind::kFailure);
  EXPECT_EQ(i.rank, 2);
  EXPECT_DOUBLE_EQ(i.failed_at, 97.9);
  EXPECT_EQ(i.message, "the launcher exited 1; the heartbeats of node 1 (h1) stopped first");
  // Within a second: no node stands out.
  beats[3] = beat(3, 98.2, 97);
  EXPECT_EQ(judge(w, beats).rank, -1);
  EXPECT_EQ(stale_node(hosts_of(beats)), -1);
}

TEST(HtrunWatch, ASilentHost) {
  std::map<int, Heartbeat> beats;
  for (int r = 0; r < 4; ++r) beats[r] = beat(r, r < 2 ? 99.9 : 97, 90);
  const auto f = silent_host(hosts_of(beats), two_nodes(), 100, /*beat_interval_s=*/0.1);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, IncidentKind::kHostLost);
  EXPECT_EQ(f->rank, 2);
  EXPECT_DOUBLE_EQ(f->failed_at, 97);
  EXPECT_EQ(f->message, "every rank on node 1 (h1) stopped beating 3.0 s ago while the others beat on");
  // Not yet: 2 s at least, ten beats of a slower interval.
  EXPECT_DOUBLE_EQ(host_silence_s(0.1), 2);
  EXPECT_DOUBLE_EQ(host_silence_s(0.5), 5);
  EXPECT_FALSE(silent_host(hosts_of(beats), two_nodes(), 100, 0.5));
  // Its agent silent too: not this rule's (silent_agent's), its summary is stale.
  Hosts quiet = hosts_of(beats);
  quiet[1].heard_s = 99.4;
  EXPECT_FALSE(silent_host(quiet, two_nodes(), 100, 0.1));
  // Every node silent (not a host) or the interval unknown.
  for (int r = 0; r < 2; ++r) beats[r] = beat(r, 97.5, 90);
  EXPECT_FALSE(silent_host(hosts_of(beats), two_nodes(), 100, 0.1));
  EXPECT_FALSE(silent_host(hosts_of(beats), two_nodes(), 100, 0));
}

TEST(HtrunWatch, TheBeatIntervalIsTheShortestGapAnAgentSaw) {
  RankBoard board;
  board.launch(1, 0, 2);
  board.beat(beat(0, 10.0, 9));
  board.beat(beat(0, 10.5, 9));
  board.beat(beat(1, 10.0, 9));
  board.beat(beat(1, 10.2, 9));
  board.beat(beat(1, 10.6, 9));
  Hosts hosts(2);
  hosts[0].summary = board.summary(11000);
  EXPECT_EQ(hosts[0].summary.beat_interval_ms, 200);
  EXPECT_DOUBLE_EQ(beat_interval_s(hosts), 0.2);
  EXPECT_DOUBLE_EQ(beat_interval_s(Hosts(2)), 0) << "no agent knows yet";
}

TEST(HtrunWatch, AHostsCommunicationWaitIsItsRanksMean) {
  RankBoard board;
  board.launch(1, 0, 3);
  auto b0 = beat(0, 10.0, 9), b1 = beat(1, 10.0, 9);
  b0.comm_wait_ms = 300;
  b1.comm_wait_ms = 900;
  board.beat(b0);
  board.beat(b1);
  EXPECT_EQ(board.summary(11000).comm_wait_ms, 600) << "rank 2 has not beaten: not counted";
  b0.comm_wait_ms = 1200;  // a newer beat: the newest figure counts
  board.beat(b0);
  EXPECT_EQ(board.summary(11000).comm_wait_ms, 1050);
  board.launch(2, 0, 3);
  EXPECT_EQ(board.summary(12000).comm_wait_ms, 0) << "a new launch forgets the old one's";
}

TEST(HtrunWatch, ANodeCutOff) {
  // h1's agent was last heard at 97; h0's speaks on.
  Hosts hosts = hosts_of(every_rank(99, 90));
  hosts[0].heard_s = 99.9;
  hosts[1].heard_s = 97;
  const auto f = silent_agent(hosts, two_nodes(), 100, /*unreachable_after_s=*/1);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, IncidentKind::kHostLost);
  EXPECT_EQ(f->rank, 2);
  EXPECT_DOUBLE_EQ(f->failed_at, 97);
  EXPECT_EQ(f->message,
            "nothing came from the node agent of node 1 (h1) for 3.0 s while the others spoke: cut off from the "
            "network, or down");
  // Not yet: silent for less than the limit.
  EXPECT_FALSE(silent_agent(hosts, two_nodes(), 100, 3.5));
  // No other agent heard since well after h1's silence began: htrun's own
  // network, or htrun itself stalled.
  hosts[0].heard_s = 97.2;
  EXPECT_FALSE(silent_agent(hosts, two_nodes(), 100, 1));
  hosts[0].heard_s = 99.9;
  // An agent never heard, or whose connection closed (agent_lost's), is not this rule's.
  hosts[1].heard_s = 0;
  EXPECT_FALSE(silent_agent(hosts, two_nodes(), 100, 1));
  hosts[1].heard_s = 97;
  hosts[1].lost_s = 98;
  EXPECT_FALSE(silent_agent(hosts, two_nodes(), 100, 1));
  // One node: nothing to compare with.
  EXPECT_FALSE(silent_agent({hosts[0]}, Placement{{{0, "h0"}}, 2}, 100, 1));
}

TEST(HtrunWatch, ANodeWhoseAgentIsLost) {
  // h1's agent's connection closed at 99.6; its ranks last beat at 99.3.
  std::map<int, Heartbeat> beats;
  for (int r = 0; r < 4; ++r) beats[r] = beat(r, r < 2 ? 99.95 : 99.3 - 0.1 * (r - 2), 90);
  Hosts hosts = hosts_of(beats);
  hosts[1].lost_s = 99.6;
  // The host does not answer either: down, at once.
  hosts[1].answers = false;
  auto f = agent_lost(hosts, two_nodes(), 99.7);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, IncidentKind::kHostLost);
  EXPECT_EQ(f->rank, 2);
  EXPECT_DOUBLE_EQ(f->failed_at, 99.3) << "its ranks' newest beat";
  EXPECT_EQ(f->message, "the node agent of node 1 (h1) lost its connection and the host does not answer: down");
  // Not known yet, or the host answers: the agent has a second to come back.
  hosts[1].answers.reset();
  EXPECT_FALSE(agent_lost(hosts, two_nodes(), 99.7));
  hosts[1].answers = true;
  EXPECT_FALSE(agent_lost(hosts, two_nodes(), 100.5));
  f = agent_lost(hosts, two_nodes(), 99.6 + kAgentReconnectS);
  ASSERT_TRUE(f);
  EXPECT_NE(f->message.find("did not come back (the host answers: the agent died"), std::string::npos) << f->message;
  // No beat ever: failed when the connection ended.
  hosts[1].summary = wire::Summary{};
  EXPECT_DOUBLE_EQ(agent_lost(hosts, two_nodes(), 101)->failed_at, 99.6);
  // Connected: nothing.
  hosts[1].lost_s = 0;
  EXPECT_FALSE(agent_lost(hosts, two_nodes(), 101));
}

// A TCP listener on the loopback, on a port of its own.
struct Listener {
  int fd = -1, port = 0;
  explicit Listener(int backlog) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = address();
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd, backlog), 0);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(); }
  sockaddr_in address() const {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(std::uint16_t(port));
    return a;
  }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Probes `port` on the loopback for `seconds`; the state at the end.
ProbeState probe_for(int port, double seconds) {
  HostProbe probe({"127.0.0.1"}, port, /*interval_s=*/0.05, /*expire_s=*/0.2);
  const double start = now_s();
  while (now_s() - start < seconds) {
    probe.poll(now_s());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return probe.states().at(0);
}

TEST(HtrunWatch, TheProbeSeesAnswersRefusalsAndSilence) {
  // A listening port answers.
  Listener open(16);
  ProbeState s = probe_for(open.port, 0.5);
  EXPECT_GT(s.last_answer_s, 0);
  EXPECT_EQ(s.missed, 0);
  EXPECT_TRUE(s.accepted);
  EXPECT_EQ(s.refused, 0);
  // A listener whose accept queue is full drops every SYN, as a host cut
  // off does: no answer, probe after probe.
  Listener full(0);
  std::vector<int> queued;
  for (int k = 0; k < 3; ++k) {  // the first fills the queue; the rest wait, as the probes will
    queued.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    const sockaddr_in a = full.address();
    ::connect(queued.back(), reinterpret_cast<const sockaddr*>(&a), sizeof(a));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double start = now_s();
  s = probe_for(full.port, 0.8);
  EXPECT_EQ(s.last_answer_s, 0);
  EXPECT_GE(s.missed, kProbesMissedToCut);
  EXPECT_GE(s.silent_since_s, start);
  for (int fd : queued) ::close(fd);
  // A closed port refuses: an answer too (the host is up). After accepts,
  // refusals in a row tell its daemon gone.
  {
    Listener daemon(16);
    HostProbe probe({"127.0.0.1"}, daemon.port, /*interval_s=*/0.05, /*expire_s=*/0.2);
    const auto look = [&](double seconds) {
      for (const double start = now_s(); now_s() - start < seconds;) {
        probe.poll(now_s());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      return probe.states().at(0);
    };
    s = look(0.3);
    EXPECT_TRUE(s.accepted);
    EXPECT_EQ(s.refused, 0);
    const double closed_at = now_s();
    daemon.close();
    s = look(0.4);
    EXPECT_TRUE(s.accepted);
    EXPECT_GE(s.refused, 2);
    EXPECT_GE(s.refused_since_s, closed_at);
    EXPECT_GT(s.last_answer_s, closed_at) << "a refusal is an answer";
    EXPECT_EQ(s.missed, 0);
  }
  open.close();
  s = probe_for(open.port, 0.3);
  EXPECT_GT(s.last_answer_s, 0);
  EXPECT_EQ(s.missed, 0);
  EXPECT_FALSE(s.accepted) << "never accepted";
  EXPECT_GT(s.refused, 0);
  EXPECT_EQ(HostProbe({"no-such-host.invalid"}, 22).unresolved(), std::vector<std::string>{"no-such-host.invalid"});
}

TEST(HtrunWatch, HangNamesTheRankThatGotLeastFar) {
  // Both ranks in step 5, stalled: the one in an earlier phase of the step
  // got less far. Loss reduction and snapshot are phases of the step (an
  // order that lacked them put them after "finish").
  std::map<int, Heartbeat> beats{{0, beat(0, 99, 10, 5, Phase::kCheckpoint)}, {1, beat(1, 99, 10, 5, Phase::kLossReduction)}};
  auto f = hang(hosts_of(beats), 100, 0, 30);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, IncidentKind::kHang);
  EXPECT_EQ(f->rank, 1);
  EXPECT_DOUBLE_EQ(f->failed_at, 10);
  beats = {{0, beat(0, 99, 10, 5, Phase::kStepDone)}, {1, beat(1, 99, 10, 5, Phase::kSnapshot)}};
  EXPECT_EQ(hang(hosts_of(beats), 100, 0, 30)->rank, 1);
  beats = {{0, beat(0, 99, 10, 5, Phase::kFinish)}, {1, beat(1, 99, 10, 5, Phase::kLossReduction)}};
  EXPECT_EQ(hang(hosts_of(beats), 100, 0, 30)->rank, 1);
  // An earlier step; then the same place, reached earlier.
  beats = {{0, beat(0, 99, 10, 4, Phase::kFinish)}, {1, beat(1, 99, 10, 5, Phase::kData)}};
  EXPECT_EQ(hang(hosts_of(beats), 100, 0, 30)->rank, 0);
  beats = {{0, beat(0, 99, 12, 5, Phase::kData)}, {1, beat(1, 99, 11, 5, Phase::kData)}};
  EXPECT_EQ(hang(hosts_of(beats), 100, 0, 30)->rank, 1);
  // A step completed recently is everyone's progress; a rank starting up is the start timeout's.
  EXPECT_FALSE(hang(hosts_of(beats), 100, 80, 30));
  beats = {{0, beat(0, 99, 10, 0, Phase::kStart)}, {1, beat(1, 99, 10, 0, Phase::kLaunch)}};
  EXPECT_FALSE(hang(hosts_of(beats), 100, 0, 30));
  // Across nodes: each node's slowest, the least far of them.
  beats = {{0, beat(0, 99, 10, 5, Phase::kStepDone)}, {3, beat(3, 99, 10, 5, Phase::kData)}};
  EXPECT_EQ(hang(hosts_of(beats), 100, 0, 30)->rank, 3);
  // A node whose agent has been silent for half the timeout or more is not
  // taken for hung (its summary is stale: the silence rules' case), nor
  // one whose agent is gone.
  Hosts stale = hosts_of(beats);
  stale[1].heard_s = 84;
  EXPECT_EQ(hang(stale, 100, 0, 30)->rank, 0);
  stale[1].heard_s = 86;
  EXPECT_EQ(hang(stale, 100, 0, 30)->rank, 3);
  stale[1].lost_s = 99;
  EXPECT_EQ(hang(stale, 100, 0, 30)->rank, 0);
  EXPECT_TRUE(behind(place_of(beat(0, 1, 1, 5, Phase::kLossReduction)), place_of(beat(1, 1, 1, 5, Phase::kCheckpoint))));
  EXPECT_FALSE(behind(place_of(beat(0, 1, 1, 5, Phase::kSnapshot)), place_of(beat(1, 1, 1, 5, Phase::kReplicaCheck))));
}

TEST(HtrunWatch, AStartThatNeverEnds) {
  std::map<int, Heartbeat> beats{{0, beat(0, 9, 9, 0, Phase::kStart)}, {2, beat(2, 9, 9, 0, Phase::kLaunch)},
                                 {3, beat(3, 9, 9, 0, Phase::kLaunch)}};
  EXPECT_EQ(start_laggard(hosts_of(beats), two_nodes()), 1) << "no heartbeat first";
  beats[1] = beat(1, 9, 9, 0, Phase::kStart);
  EXPECT_EQ(start_laggard(hosts_of(beats), two_nodes()), 2) << "then MPI not up";
  beats[2] = beat(2, 9, 9, 1, Phase::kData);
  beats[3] = beat(3, 9, 9, 1, Phase::kData);
  EXPECT_EQ(start_laggard(hosts_of(beats), two_nodes()), 0) << "then still starting";
  beats[0] = beat(0, 9, 9, 1, Phase::kData);
  beats[1] = beat(1, 9, 9, 1, Phase::kData);
  EXPECT_EQ(start_laggard(hosts_of(beats), two_nodes()), -1);

  // A node whose agent sent nothing yet: none of its ranks beat.
  Hosts hosts = hosts_of(beats);
  hosts[1].summarized = false;
  hosts[1].summary = wire::Summary{};
  EXPECT_EQ(start_laggard(hosts, two_nodes()), 2);

  beats.erase(1);
  Finding f = start_not_finished(hosts_of(beats), 1, 50, 5, "gpt_train");
  EXPECT_EQ(f.kind, IncidentKind::kHang);
  EXPECT_EQ(f.rank, 1);
  EXPECT_DOUBLE_EQ(f.failed_at, 55);
  EXPECT_EQ(f.message, "rank 1 did not start within the start timeout (5 s)");
  beats[1] = beat(1, 9, 9, 1, Phase::kData);
  beats[0] = beat(0, 9, 9, 0, Phase::kStart);
  ASSERT_EQ(start_laggard(hosts_of(beats), two_nodes()), 0);
  EXPECT_EQ(start_not_finished(hosts_of(beats), 0, 50, 5, "gpt_train").message,
            "rank 0 did not finish starting within the start timeout (5 s)");
  f = start_not_finished(hosts_of({}), 0, 50, 5, "gpt_train");
  EXPECT_EQ(f.kind, IncidentKind::kNoHeartbeat);
  EXPECT_EQ(f.rank, -1);
  EXPECT_NE(f.message.find("'gpt_train' does not keep htrun's contract (heartbeats to its node agent"),
            std::string::npos)
      << f.message;
}

TEST(HtrunNext, NodesHealthCheckedForEachKind) {
  const std::vector<Node> active{{0, ""}, {1, ""}, {2, ""}};
  auto ids = [&](const Incident& i) {
    std::vector<int> out;
    for (const Node& n : nodes_to_check(i, active)) out.push_back(n.id);
    return out;
  };
  Incident i;
  i.node = 1;
  for (IncidentKind k : {IncidentKind::kCrash, IncidentKind::kHostLost, IncidentKind::kHang, IncidentKind::kStraggler,
                         IncidentKind::kCommFailure, IncidentKind::kFailure}) {
    i.kind = k;
    EXPECT_EQ(ids(i), std::vector<int>{1}) << incident_kind_name(k);
  }
  i.kind = IncidentKind::kDivergence;
  EXPECT_TRUE(ids(i).empty()) << "the numerics, not a node";
  i.kind = IncidentKind::kCorruption;
  EXPECT_EQ(ids(i), (std::vector<int>{0, 1, 2})) << "any replica may lie";
  i.kind = IncidentKind::kFailure;
  i.node = -1;
  EXPECT_EQ(ids(i), (std::vector<int>{0, 1, 2})) << "no node known";
  i.kind = IncidentKind::kCommFailure;
  i.suspect_nodes = {2, 0};
  EXPECT_EQ(ids(i), (std::vector<int>{0, 2})) << "the ends of a cut link";

  i = {};
  i.kind = IncidentKind::kStraggler;
  i.node = 2;
  EXPECT_TRUE(cordon_even_if_healthy(i));
  i.node = -1;
  EXPECT_FALSE(cordon_even_if_healthy(i));
  i.kind = IncidentKind::kHang;
  i.node = 2;
  EXPECT_FALSE(cordon_even_if_healthy(i));
}

TEST(HtrunNext, BackoffDoublesUpToItsCap) {
  EXPECT_EQ(failures_in_a_row(0, 4, 4), 1);
  EXPECT_EQ(failures_in_a_row(1, 4, 4), 2);
  EXPECT_EQ(failures_in_a_row(3, 5, 4), 0) << "a launch that trained past its checkpoint";
  EXPECT_DOUBLE_EQ(backoff_s(0, 1), 0);
  EXPECT_DOUBLE_EQ(backoff_s(1, 1), 1);
  EXPECT_DOUBLE_EQ(backoff_s(2, 1), 2);
  EXPECT_DOUBLE_EQ(backoff_s(3, 1), 4);
  EXPECT_DOUBLE_EQ(backoff_s(5, 1), 16);
  EXPECT_DOUBLE_EQ(backoff_s(6, 1), kMaxBackoffS);
  EXPECT_DOUBLE_EQ(backoff_s(40, 0.5), 16) << "the doubling stops at 32 times the base";
  EXPECT_DOUBLE_EQ(backoff_s(3, 10), kMaxBackoffS);
}

TEST(HtrunSummaries, TheIntervalGrowsWithHostsWithinAThirdOfTheSilenceAllowed) {
  EXPECT_EQ(auto_summary_interval_ms(8, 3), 500);
  EXPECT_EQ(auto_summary_interval_ms(4096, 3), 500) << "8,192 summaries a second";
  EXPECT_EQ(auto_summary_interval_ms(6144, 3), 750);
  EXPECT_EQ(auto_summary_interval_ms(8192, 3), 1000);
  EXPECT_EQ(auto_summary_interval_ms(16384, 3), 1000) << "a host silent for 3 s is cut off: at most 1 s";
  EXPECT_EQ(auto_summary_interval_ms(16384, 6), 2000);
  EXPECT_EQ(auto_summary_interval_ms(100000, 1), 500) << "never below 500 ms";
}

TEST(HtrunNext, FailedBeforeTrainingAndPreemption) {
  Watch w;
  w.exit_code = 1;
  w.resume_step = w.reached = 4;
  EXPECT_TRUE(failed_before_training(w));
  w.exit_code = 137;
  EXPECT_FALSE(failed_before_training(w)) << "killed by a signal";
  w.exit_code = 1;
  w.first_step = 5;
  EXPECT_FALSE(failed_before_training(w)) << "it trained";
  w.first_step = -1;
  w.exits = {record(0, ExitKind::kError, 1)};
  EXPECT_FALSE(failed_before_training(w)) << "it said why";

  Watch p;
  p.resume_step = 4, p.reached = 7, p.checkpoint_step = 7;
  EXPECT_EQ(preemption_verdict(p), "preempted: checkpoint of step 7 saved, stopped");
  p.checkpoint_step = 4;
  EXPECT_EQ(preemption_verdict(p),
            "preempted: no new checkpoint (the newest is step 4; the job had reached step 7), stopped");
}

// The supervisor on a clock of the test's own: a launcher that fails at once
// with a new code each time (so no "twice in a row" stop) is relaunched
// after a back-off of 1, 2 and 4 s of that clock, with no real waiting,
// until the restarts run out.
TEST(HtrunWatch, ARecordedCommunicationFailureEndsTheLaunch) {
  ExitRecord named{.rank = 0, .code = 74, .kind = ht::resilience::ExitKind::kCommFailure, .time_ms = 5000,
                   .blamed_ranks = {1}};
  ExitRecord later = named;
  later.rank = 2;
  later.time_ms = 4000;
  EXPECT_EQ(comm_failure_recorded({named, later}), 4.0) << "the first record's time";
  ExitRecord unnamed = named;
  unnamed.blamed_ranks.clear();
  EXPECT_FALSE(comm_failure_recorded({unnamed})) << "no peer named: the launch ends by itself";
  ExitRecord diverged = named;
  diverged.kind = ht::resilience::ExitKind::kDivergence;
  EXPECT_FALSE(comm_failure_recorded({diverged})) << "ranks that leave on purpose leave together";
  EXPECT_FALSE(comm_failure_recorded({}));
}

TEST(HtrunGray, TrainingThatCrawlsIsStalled) {
  Progress p;
  for (int k = 0; k <= 3; ++k) p.emplace_back(100 + 0.5 * k, 50 * k);  // 100 steps a second
  EXPECT_NEAR(baseline_step_s(p), 0.01, 1e-9);
  EXPECT_FALSE(steps_stalled(p, 102.5)) << "a summary's interval without a step is not a crawl";
  EXPECT_FALSE(steps_stalled(p, 103.4));
  EXPECT_TRUE(steps_stalled(p, 103.6)) << "two seconds: the floor over twenty steps";
  EXPECT_FALSE(steps_stalled({p.begin(), p.begin() + 3}, 200)) << "no baseline before three looks that grew";
  // A crawl that set in early does not become the baseline: the fastest stepping does.
  for (int k = 1; k <= 20; ++k) p.emplace_back(101.5 + 3.0 * k, 150 + k);  // 3 s a step
  EXPECT_NEAR(baseline_step_s(p), 0.01, 1e-9);
  EXPECT_TRUE(steps_stalled(p, p.back().first + 2.1));
  // Slow steps all along: twenty of them without progress.
  Progress slow;
  for (int k = 0; k <= 10; ++k) slow.emplace_back(100 + 2.0 * k, k);  // 2 s a step
  EXPECT_FALSE(steps_stalled(slow, 150));
  EXPECT_TRUE(steps_stalled(slow, 161));
}

TEST(HtrunGray, ALinkFarSlowerThanTheOthersFails) {
  const Placement p = two_nodes();
  // Node 1 (active) took 2 s for 256 KB, node 0 and the spare 2 ten ms.
  std::vector<LinkTestRun> runs{{.request = 1, .node = 0, .index = 0, .bytes = 262144, .sent_s = 10, .done_s = 10.01},
                                {.request = 2, .node = 1, .index = 1, .bytes = 262144, .sent_s = 10, .done_s = 12},
                                {.request = 3, .node = 2, .index = -1, .bytes = 262144, .sent_s = 10, .done_s = 10.01}};
  EXPECT_TRUE(link_tests_settled(runs, 12.5, 5));
  auto f = slow_link(runs, p, 12.5);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, IncidentKind::kStraggler);
  EXPECT_EQ(f->rank, 2) << "its first rank";
  EXPECT_DOUBLE_EQ(f->failed_at, 10);
  EXPECT_NE(f->message.find("the link of node 1 (h1) carried 131 KB/s, 200 times slower than the median of the 3 "
                            "nodes tested (26214 KB/s)"),
            std::string::npos)
      << f->message;
  // Not done yet: counted by its time so far, slower still; out until settled.
  runs[1].done_s = 0;
  EXPECT_FALSE(link_tests_settled(runs, 12, 5));
  EXPECT_TRUE(link_tests_settled(runs, 15.1, 5));
  EXPECT_NE(slow_link(runs, p, 15.1)->message.find("or less"), std::string::npos);
  // Within ten times of the median: the load of a shared machine, not a failure.
  runs[1].done_s = 10.09;
  EXPECT_FALSE(slow_link(runs, p, 12));
  // A slow spare is a reference, never the culprit; two nodes say nothing of which is slow.
  runs[1].done_s = 10.01;
  runs[2].done_s = 14;
  EXPECT_FALSE(slow_link(runs, p, 15));
  runs.pop_back();
  runs[1].done_s = 14;
  EXPECT_FALSE(slow_link(runs, p, 15));
}

TEST(HtrunWatch, ADeathIsACrashOnlyBeforeAnyFailureRecord) {
  // Rank 1 died first, then rank 0: rank 1 crashed.
  EXPECT_EQ(crash_among({{0, 5.2}, {1, 5.0}}, {}).rank, 1);
  EXPECT_DOUBLE_EQ(crash_among({{0, 5.2}, {1, 5.0}}, {}).time_s, 5.0);
  // Rank 1 left with a record of its failure (a peer timed out) and the
  // launcher then killed rank 0: no crash, the record tells.
  const ExitRecord failed{.rank = 1, .code = 74, .kind = ExitKind::kCommFailure, .time_ms = 4900, .blamed_ranks = {0}};
  EXPECT_EQ(crash_among({{0, 5.2}}, {failed}).rank, -1);
  // A death before the record is still the first thing that happened.
  EXPECT_EQ(crash_among({{0, 4.5}}, {failed}).rank, 0);
  // A rank that finished (exit record 0) is no failure.
  const ExitRecord done{.rank = 1, .code = 0, .kind = ExitKind::kOk, .time_ms = 4000};
  EXPECT_EQ(crash_among({{0, 5.2}}, {done}).rank, 0);
  EXPECT_EQ(crash_among({}, {}).rank, -1);
}

TEST(HtrunNext, ALostHostIsCordonedUncheckedOnlyWithASpareReady) {
  Incident lost;
  lost.kind = IncidentKind::kHostLost;
  lost.node = 1;
  EXPECT_TRUE(cordon_unchecked(lost, true));
  EXPECT_FALSE(cordon_unchecked(lost, false)) << "no spare: a host that passes its check keeps the job going";
  Incident crash = lost;
  crash.kind = IncidentKind::kCrash;
  EXPECT_FALSE(cordon_unchecked(crash, true)) << "a rank that crashed says nothing of its host";
  Incident unknown = lost;
  unknown.node = -1;
  EXPECT_FALSE(cordon_unchecked(unknown, true));
  // A named straggler (a slow link) is cordoned whatever its check says: not checked while a spare is ready.
  Incident straggler = lost;
  straggler.kind = IncidentKind::kStraggler;
  EXPECT_TRUE(cordon_unchecked(straggler, true));
  EXPECT_FALSE(cordon_unchecked(straggler, false));
}

TEST(HtrunNext, NodesToReadmitAfterTheirTime) {
  const std::vector<Cordoned> cordoned{{{3, "h3"}, 100.0}, {{1, "h1"}, 110.0}, {{2, "h2"}, 119.5}};
  const auto ids = [](const std::vector<Node>& nodes) {
    std::vector<int> out;
    for (const Node& n : nodes) out.push_back(n.id);
    return out;
  };
  EXPECT_EQ(ids(nodes_to_readmit(cordoned, 120, 10)), (std::vector<int>{1, 3})) << "in id order, at the limit included";
  EXPECT_EQ(ids(nodes_to_readmit(cordoned, 120, 0)), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(nodes_to_readmit(cordoned, 120, 0).front().host, "h1");
  EXPECT_TRUE(nodes_to_readmit(cordoned, 1e9, -1).empty()) << "a negative delay: never";
  EXPECT_TRUE(nodes_to_readmit({}, 120, 0).empty());
}

// Whether `pid` is gone (or only a zombie left to its new parent).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && text.substr(close + 2, 1) == "Z";
}

// A launcher's helpers in process groups of their own (Open MPI starts its
// ssh clients so): stopping the launcher ends them too, so that none holds
// its output open and the watch does not wait on it.
TEST(HtrunChildProcess, StopEndsHelpersInGroupsOfTheirOwn) {
  const fs::path dir = fs::temp_directory_path() / ("htrun_child_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string pid_file = (dir / "helper.pid").string();
  ChildProcess job({"sh", "-c", "setsid sh -c 'echo $$ > \"$0\"; exec sleep 60' \"$0\" & wait", pid_file}, {},
                   (dir / "log.txt").string(), /*echo=*/false);
  pid_t helper = 0;
  for (int i = 0; i < 500 && helper <= 0; ++i) {
    std::ifstream(pid_file) >> helper;
    if (helper <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(helper, 0) << "the helper never started";
  EXPECT_EQ(::getpgid(helper), helper) << "the helper should lead a group of its own";
  const double t0 = now_s();
  job.stop(0);
  job.finish(5.0);  // returns once nothing holds the output open
  EXPECT_LT(now_s() - t0, 2.0) << "the launcher's output stayed open: its helper outlived the stop";
  for (int i = 0; i < 200 && !process_gone(helper); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(process_gone(helper)) << "the helper in its own group still runs";
  fs::remove_all(dir);
}

// The supervisor on a clock of the test's own, over simulated hosts whose
// launcher fails at once with a new code each time (so no "twice in a row"
// stop): relaunched after a back-off of 1, 2 and 4 s of that clock, with
// no real waiting, until the restarts run out.
TEST(HtrunSupervisor, BackoffOnItsOwnClock) {
  const fs::path dir = fs::temp_directory_path() / ("htrun_decisions_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  double clock_s = 1000;
  std::mutex mu;
  Clock clock{.now = [&] { std::lock_guard lock(mu); return clock_s; },
              .sleep = [&](double s) {
                { std::lock_guard lock(mu); clock_s += s; }
                ::usleep(500);  // let the simulated hosts answer
              }};
  SimCluster hosts(SimOptions{});
  std::vector<double> launched_at;
  struct Recording : Spawner {
    std::shared_ptr<Spawner> inner;
    std::function<void()> on_launch;
    std::unique_ptr<Process> launch(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                    const std::string& log, Process::LineParser parser) override {
      on_launch();
      return inner->launch(argv, env, log, std::move(parser));
    }
    std::unique_ptr<Process> agent(const Node& node, const std::vector<std::string>& argv, const wire::Secret& secret,
                                   const std::string& log) override {
      return inner->agent(node, argv, secret, log);
    }
  };
  auto spawner = std::make_shared<Recording>();
  spawner->inner = hosts.spawner(/*launcher_exit=*/2);
  spawner->on_launch = [&] { launched_at.push_back(clock.now()); };
  SupervisorOptions o;
  o.run_dir = (dir / "run").string();
  o.max_restarts = 3;
  o.backoff_s = 1;
  o.start_timeout_s = 0;
  o.health = false;
  o.program = {"train"};
  const auto wall_start = std::chrono::steady_clock::now();
  const Report report = Supervisor(o, Cluster::local(1), clock, spawner).run();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  EXPECT_EQ(report.exit_code, kSupervisorGaveUp);
  EXPECT_EQ(report.verdict, "gave up after 3 restarts");
  EXPECT_EQ(report.restarts, 3);
  ASSERT_EQ(report.incidents.size(), 4u);
  for (const Incident& i : report.incidents) EXPECT_EQ(i.kind, IncidentKind::kFailure);
  EXPECT_EQ(report.incidents.back().exit_code, 6);
  ASSERT_EQ(launched_at.size(), 4u);
  // Each relaunch after its back-off from the detection (the watch's last
  // look and the agents' acknowledgements add a few tenths).
  for (std::size_t k = 1; k < launched_at.size(); ++k)
    EXPECT_NEAR(launched_at[k] - launched_at[k - 1], double(1 << (k - 1)), 0.4) << "relaunch " << k;
  EXPECT_GE(report.wall_s, 7) << "the report's wall time is the supervisor's clock";
  EXPECT_LT(wall_s, 10) << "the back-off waited on the test's clock";
  fs::remove_all(dir);
}

// The real supervisor over simulated hosts speaking the agent protocol:
// what each fault is decided as, whom it blames, and that the job goes on.
class HtrunOnSimulatedHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("htrun_sim_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.run_dir = (dir_ / "run").string();
    options_.slots = 4;
    options_.spares = 1;
    options_.backoff_s = 0.1;
    options_.hang_timeout_s = 2;
    options_.unreachable_after_s = 1;
    options_.summary_interval_ms = 100;
    options_.max_restarts = 3;
    options_.program = {"train"};
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Runs the supervisor on `nodes` simulated hosts (one a spare) while
  // `fault` acts on them from another thread; then preempts it (SIGTERM).
  Report run(int nodes, const std::function<void(SimCluster&)>& fault, double run_s) {
    SimCluster hosts(sim_);
    std::thread faults([&] {
      fault(hosts);
      std::this_thread::sleep_for(std::chrono::duration<double>(run_s));
      ::kill(::getpid(), SIGTERM);  // the supervisor passes it on and stops
    });
    Report report = Supervisor(options_, Cluster::local(nodes), {}, hosts.spawner()).run();
    faults.join();
    return report;
  }
  // Waits until the simulated ranks are `steps` steps in.
  void after_steps(double steps) const {
    std::this_thread::sleep_for(std::chrono::duration<double>(sim_.start_s + steps * sim_.step_s + 0.5));
  }

  fs::path dir_;
  SupervisorOptions options_;
  SimOptions sim_{.start_s = 0.2, .step_s = 0.05, .beat_s = 0.05, .steps = 1000000, .daemon_port = 0};
};

TEST_F(HtrunOnSimulatedHosts, AHostThatCrashesIsLostAndReplaced) {
  double crashed_at = 0;
  const Report r = run(4, [&](SimCluster& c) { after_steps(5); crashed_at = now_s(); c.crash(1); }, 2.0);
  ASSERT_GE(r.incidents.size(), 2u);
  const Incident& i = r.incidents.front();
  EXPECT_EQ(i.kind, IncidentKind::kHostLost);
  EXPECT_EQ(i.node, 1);
  EXPECT_EQ(i.rank, 4) << "its first rank";
  EXPECT_NE(i.message.find("the node agent of node 1 lost its connection"), std::string::npos) << i.message;
  // No probe here (simulated nodes have no host to probe): the agent's
  // second to come back, and the watch's tenth.
  EXPECT_LT(i.detected_at - crashed_at, kAgentReconnectS + 0.5);
  EXPECT_EQ(r.cordoned, std::vector<int>{1});
  EXPECT_EQ(r.active, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(r.incidents.back().kind, IncidentKind::kPreemption);
  EXPECT_EQ(r.exit_code, kSupervisorPreempted);
  ASSERT_EQ(r.launches.size(), 2u);
  EXPECT_TRUE(r.launches[1].unacknowledged.empty());
}

TEST_F(HtrunOnSimulatedHosts, AHostCutOffIsDecidedAfterItsSilence) {
  double cut_at = 0;
  const Report r = run(4, [&](SimCluster& c) { after_steps(5); cut_at = now_s(); c.cut(2); }, 2.5);
  ASSERT_GE(r.incidents.size(), 2u);
  const Incident& i = r.incidents.front();
  EXPECT_EQ(i.kind, IncidentKind::kHostLost);
  EXPECT_EQ(i.node, 2);
  EXPECT_NE(i.message.find("nothing came from the node agent of node 2"), std::string::npos) << i.message;
  EXPECT_GE(i.detected_at - cut_at, options_.unreachable_after_s - 0.15);
  EXPECT_LT(i.detected_at - cut_at, options_.unreachable_after_s + 0.5);
  EXPECT_EQ(r.cordoned, std::vector<int>{2});
}

TEST_F(HtrunOnSimulatedHosts, AHostWhoseLinkCrawlsIsReplaced) {
  double slowed_at = 0;
  const Report r = run(4, [&](SimCluster& c) {
    after_steps(20);
    slowed_at = now_s();
    c.slow_link(1, 125000, 100);  // 1 Mbit/s; steps a hundred times as long
  }, 6.0);
  ASSERT_GE(r.incidents.size(), 2u);
  const Incident& i = r.incidents.front();
  EXPECT_EQ(i.kind, IncidentKind::kStraggler);
  EXPECT_EQ(i.node, 1);
  EXPECT_NE(i.message.find("the link of node 1 carried"), std::string::npos) << i.message;
  // The crawl seen after two seconds without a step, the tests out for the
  // slow link's 2 s.
  EXPECT_LT(i.detected_at - slowed_at, 5.0);
  EXPECT_EQ(r.cordoned, std::vector<int>{1});
  EXPECT_EQ(r.active, (std::vector<int>{0, 2, 3}));
}

TEST_F(HtrunOnSimulatedHosts, AHungRankIsNamedAndItsNodeChecked) {
  double hung_at = 0;
  const Report r = run(4, [&](SimCluster& c) {
    after_steps(5);
    hung_at = now_s();
    c.set_unhealthy(1, true);
    c.hang(6);
  }, options_.hang_timeout_s + 2.5);
  ASSERT_GE(r.incidents.size(), 2u);
  const Incident& i = r.incidents.front();
  EXPECT_EQ(i.kind, IncidentKind::kHang);
  EXPECT_EQ(i.rank, 6);
  EXPECT_EQ(i.node, 1);
  // Progress is recorded in whole milliseconds: the hung rank's last can
  // read up to 1 ms before hung_at.
  EXPECT_GE(i.detected_at - hung_at, options_.hang_timeout_s - 0.002);
  EXPECT_LT(i.detected_at - hung_at, options_.hang_timeout_s + 1.0);
  ASSERT_EQ(i.health.size(), 1u);
  EXPECT_FALSE(i.health[0].healthy) << "its check, run by its agent, failed";
  EXPECT_EQ(r.cordoned, std::vector<int>{1});
}

}  // namespace
}  // namespace htrun
