// The node agents' wire protocol (src/tools/htrun/wire.h) and its two ends:
// every message survives its encoding; frames forged without the secret,
// replayed on their own connection or another, cut short or damaged are
// dropped and counted by the controller (controller.h) and by an agent's
// link (controller_link.h), never acted on; and the rank-to-agent channel's
// messages (run_protocol.h) read back.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "ht/resilience/run_protocol.h"
#include "htrun/controller.h"
#include "htrun/controller_link.h"
#include "htrun/wire.h"

namespace htrun {
namespace {

using ht::resilience::ExitKind;
using ht::resilience::Phase;

wire::Secret secret_of(std::uint8_t fill) {
  wire::Secret s;
  s.fill(fill);
  return s;
}

// A connected agent and controller channel pair, handshake done.
struct Pair {
  wire::Channel agent{wire::Channel::Role::kAgent, secret_of(7)};
  wire::Channel controller{wire::Channel::Role::kController, secret_of(7)};
  Pair() {
    const std::string hello = agent.seal(wire::Hello{.node = 3, .host = "h3", .pid = 42, .agent_nonce = {}});
    auto opened = controller.open(frame_of(hello));
    EXPECT_EQ(opened.drop, wire::Drop::kNone);
    const auto& h = std::get<wire::Hello>(*opened.message);
    const std::string welcome = controller.seal(wire::Welcome{.agent_nonce = h.agent_nonce,
                                                              .controller_nonce = {},
                                                              .summary_interval_ms = 250,
                                                              .controller_lost_ms = 4000,
                                                              .epoch = 9});
    opened = agent.open(frame_of(welcome));
    EXPECT_EQ(opened.drop, wire::Drop::kNone);
    EXPECT_TRUE(agent.established());
  }
  // A frame without its length prefix, as FrameReader gives it.
  static std::string frame_of(const std::string& sealed) { return sealed.substr(4); }
};

TEST(AgentWire, EveryMessageSurvivesItsEncoding) {
  Pair p;
  wire::Summary summary{.time_ms = 123456,
                        .epoch = 9,
                        .ranks = 8,
                        .beating = 7,
                        .live = 6,
                        .newest_beat_ms = 123400,
                        .newest_progress_ms = 123300,
                        .beat_interval_ms = 100,
                        .completed_step = 41,
                        .slowest = wire::RankPlace{.rank = 5, .step = 42, .phase = Phase::kGradientReduction,
                                                   .progress_ms = 123000, .time_ms = 123400},
                        .laggard = {.rank = 3, .step = 0, .phase = Phase::kStart, .progress_ms = 1, .time_ms = 2},
                        .comm_wait_ms = 4321};
  const std::string sealed = p.agent.seal(summary);
  const auto opened = p.controller.open(Pair::frame_of(sealed));
  ASSERT_EQ(opened.drop, wire::Drop::kNone);
  const auto& back = std::get<wire::Summary>(*opened.message);
  EXPECT_EQ(back.completed_step, 41);
  EXPECT_EQ(back.newest_progress_ms, 123300);
  ASSERT_TRUE(back.slowest);
  EXPECT_EQ(back.slowest->phase, Phase::kGradientReduction);
  EXPECT_EQ(back.slowest->rank, 5);
  EXPECT_EQ(back.laggard.phase, Phase::kStart);
  EXPECT_EQ(back.comm_wait_ms, 4321);

  const ht::resilience::ExitRecord record{.rank = 4, .code = 74, .kind = ExitKind::kCommFailure, .step = 12,
                                          .phase = Phase::kGradientReduction, .time_ms = 99, .message = "timed out",
                                          .blamed_ranks = {1, 2}, .epoch = 9};
  auto x = p.controller.open(Pair::frame_of(p.agent.seal(wire::RankExit{record})));
  ASSERT_TRUE(x.message);
  const auto& r = std::get<wire::RankExit>(*x.message).record;
  EXPECT_EQ(r.blamed_ranks, (std::vector<int>{1, 2}));
  EXPECT_EQ(r.message, "timed out");
  EXPECT_EQ(r.kind, ExitKind::kCommFailure);

  x = p.agent.open(Pair::frame_of(p.controller.seal(
      wire::HealthCheck{.request = 5, .argv = {"ht-health", "--node", "3"}, .timeout_ms = 1000})));
  ASSERT_TRUE(x.message);
  EXPECT_EQ(std::get<wire::HealthCheck>(*x.message).argv, (std::vector<std::string>{"ht-health", "--node", "3"}));
  x = p.agent.open(Pair::frame_of(p.controller.seal(wire::Launch{.request = 6, .epoch = 10, .first_rank = 8, .ranks = 4})));
  ASSERT_TRUE(x.message);
  EXPECT_EQ(std::get<wire::Launch>(*x.message).first_rank, 8);
  EXPECT_STREQ(wire::message_name(*x.message), "launch");
}

TEST(AgentWire, ForgedReplayedAndMalformedFramesAreDropped) {
  Pair p;
  const std::string good = Pair::frame_of(p.agent.seal(wire::Ack{.request = 1, .epoch = 9, .ranks_left = 0}));
  // Replayed on its own connection: its sequence number is not above the last.
  ASSERT_EQ(p.controller.open(good).drop, wire::Drop::kNone);
  EXPECT_EQ(p.controller.open(good).drop, wire::Drop::kReplayed);
  // Replayed on another connection: other nonces, other session keys.
  Pair other;
  EXPECT_EQ(other.controller.open(good).drop, wire::Drop::kBadMac);
  // Forged: sealed with another secret.
  wire::Channel forger(wire::Channel::Role::kAgent, secret_of(8));
  const std::string forged_hello = Pair::frame_of(forger.seal(wire::Hello{.node = 1, .host = "x", .pid = 1, .agent_nonce = {}}));
  wire::Channel fresh(wire::Channel::Role::kController, secret_of(7));
  EXPECT_EQ(fresh.open(forged_hello).drop, wire::Drop::kBadMac);
  // One byte of a payload changed: the MAC no longer holds.
  std::string flipped = Pair::frame_of(p.agent.seal(wire::Ack{.request = 2, .epoch = 9, .ranks_left = 0}));
  flipped[12] ^= 1;
  EXPECT_EQ(p.controller.open(flipped).drop, wire::Drop::kBadMac);
  // Cut short, or another version.
  EXPECT_EQ(p.controller.open(good.substr(0, 20)).drop, wire::Drop::kMalformed);
  std::string version = good;
  version[0] = 9;
  EXPECT_EQ(p.controller.open(version).drop, wire::Drop::kMalformed);
  // A controller's message from an agent, or a second Hello.
  wire::Channel impostor = p.agent;  // holds the agent's session keys
  EXPECT_EQ(p.controller.open(Pair::frame_of(p.agent.seal(wire::Bye{}))).drop, wire::Drop::kUnexpected);
  EXPECT_EQ(p.controller.open(Pair::frame_of(impostor.seal(wire::Hello{}))).drop, wire::Drop::kUnexpected);
  // A Welcome for another connection (someone else's nonce) does not set up a session.
  wire::Channel agent(wire::Channel::Role::kAgent, secret_of(7));
  (void)agent.seal(wire::Hello{});
  wire::Channel controller(wire::Channel::Role::kController, secret_of(7));
  const std::string stray = Pair::frame_of(controller.seal(wire::Welcome{.agent_nonce = wire::make_nonce(),
                                                                         .controller_nonce = {},
                                                                         .summary_interval_ms = 100,
                                                                         .controller_lost_ms = 1000,
                                                                         .epoch = 1}));
  EXPECT_EQ(agent.open(stray).drop, wire::Drop::kBadMac);
  EXPECT_FALSE(agent.established());
  // Values out of range are not a message: a Summary with more beating ranks than ranks.
  wire::Summary bad;
  bad.ranks = 2;
  bad.beating = 3;
  EXPECT_EQ(p.controller.open(Pair::frame_of(p.agent.seal(bad))).drop, wire::Drop::kMalformed);
}

TEST(AgentWire, FramesAreSplitAndAStreamOutOfStepIsBroken) {
  Pair p;
  const std::string a = p.agent.seal(wire::Ack{.request = 1, .epoch = 1, .ranks_left = 0});
  const std::string b = p.agent.seal(wire::Ack{.request = 2, .epoch = 1, .ranks_left = 0});
  const std::string both = a + b;
  wire::FrameReader reader;
  for (char c : both) reader.feed(&c, 1);  // byte by byte
  const auto first = reader.next(), second = reader.next();
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(reader.next());
  EXPECT_EQ(std::get<wire::Ack>(*p.controller.open(*first).message).request, 1u);
  EXPECT_EQ(std::get<wire::Ack>(*p.controller.open(*second).message).request, 2u);
  wire::FrameReader huge;
  const char length[4] = {0x7f, 0, 0, 0};
  huge.feed(length, 4);
  EXPECT_FALSE(huge.next());
  EXPECT_TRUE(huge.broken());
}

TEST(AgentWire, TheSecretTravelsAsHex) {
  const wire::Secret s = wire::make_secret();
  EXPECT_EQ(wire::parse_secret_hex(wire::secret_hex(s)), s);
  EXPECT_FALSE(wire::parse_secret_hex("abc"));
  EXPECT_FALSE(wire::parse_secret_hex(std::string(64, 'g')));
  EXPECT_NE(wire::make_secret(), s);
}

// A raw TCP client of the controller.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
}

// Reads what arrives on `fd` for `seconds`: "" when the peer closed.
std::string read_for(int fd, double seconds) {
  std::string out;
  timeval tv{0, 50000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  char buffer[4096];
  while (std::chrono::steady_clock::now() < until) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n > 0) out.append(buffer, std::size_t(n));
  }
  return out;
}

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

TEST(AgentWire, TheControllerActsOnNothingForgedReplayedOrMalformed) {
  Controller controller(ControllerOptions{.bind_address = "127.0.0.1", .port = 0, .secret = secret_of(7),
                                          .summary_interval_ms = 100, .controller_lost_ms = 2000,
                                          .handshake_timeout_s = 0.5},
                        now_s);
  const auto turn = [&](double seconds) {
    const double until = now_s() + seconds;
    while (now_s() < until) controller.poll(0.01);
  };
  // A real agent's link: it connects, proves itself and sends a summary.
  ControllerLink link("127.0.0.1", controller.port(), secret_of(7), 2, "h2");
  const auto drive = [&](double seconds) {
    const double until = now_s() + seconds;
    while (now_s() < until) {
      link.tick(now_s());
      link.on_writable(now_s());
      link.on_readable(now_s());
      controller.poll(0.01);
    }
  };
  drive(0.3);
  ASSERT_TRUE(link.welcomed());
  wire::Summary summary;
  summary.epoch = 9;
  summary.ranks = 4;
  ASSERT_TRUE(link.send(summary));
  drive(0.2);
  ASSERT_TRUE(controller.agent(2) && controller.agent(2)->connected);
  EXPECT_EQ(controller.agent(2)->summary->ranks, 4);

  // 1. Forged: a Hello sealed with another secret. The connection is closed,
  //    node 5 never appears.
  wire::Channel forger(wire::Channel::Role::kAgent, secret_of(8));
  int fd = connect_to(controller.port());
  send_all(fd, forger.seal(wire::Hello{.node = 5, .host = "evil", .pid = 1, .agent_nonce = {}}));
  turn(0.1);
  EXPECT_EQ(read_for(fd, 0.1), "") << "no Welcome for a forger";
  ::close(fd);
  // 2. Replayed: a genuine agent's Hello and summary, recorded and sent again
  //    on a new connection. The Hello earns a Welcome; the summary, sealed
  //    for the old connection's keys, fails its MAC, and the connection never
  //    counts for node 6.
  wire::Channel genuine(wire::Channel::Role::kAgent, secret_of(7));
  const std::string hello = genuine.seal(wire::Hello{.node = 6, .host = "h6", .pid = 1, .agent_nonce = {}});
  wire::Channel listener(wire::Channel::Role::kController, secret_of(7));
  const auto h = std::get<wire::Hello>(*listener.open(hello.substr(4)).message);
  (void)genuine.open(listener.seal(wire::Welcome{.agent_nonce = h.agent_nonce, .controller_nonce = {},
                                                 .summary_interval_ms = 100, .controller_lost_ms = 1000, .epoch = 1})
                         .substr(4));
  wire::Summary lie;
  lie.epoch = 9;
  lie.ranks = 1;
  const std::string recorded = genuine.seal(lie);
  fd = connect_to(controller.port());
  send_all(fd, hello + recorded);
  turn(0.1);
  EXPECT_FALSE(controller.agent(6) && controller.agent(6)->connected);
  EXPECT_FALSE(controller.agent(6) && controller.agent(6)->summary);
  ::close(fd);
  // 3. Malformed: garbage, and a length out of range.
  fd = connect_to(controller.port());
  send_all(fd, std::string("\x00\x00\x00\x30", 4) + std::string(48, 'x'));
  turn(0.1);
  ::close(fd);
  fd = connect_to(controller.port());
  send_all(fd, std::string("\x7f\xff\xff\xff", 4));
  turn(0.1);
  EXPECT_EQ(read_for(fd, 0.1), "") << "closed";
  ::close(fd);
  // 4. A connection that never proves itself is closed after the handshake timeout.
  fd = connect_to(controller.port());
  turn(0.7);
  EXPECT_EQ(read_for(fd, 0.1), "");
  ::close(fd);

  const ControllerCounts& c = controller.counts();
  EXPECT_GE(c.dropped[std::size_t(wire::Drop::kBadMac)], 2u) << "the forged Hello and the replayed summary";
  EXPECT_GE(c.dropped[std::size_t(wire::Drop::kMalformed)], 1u);
  EXPECT_GE(c.broken_streams, 1u);
  EXPECT_GE(c.handshake_timeouts, 1u);
  EXPECT_EQ(c.established, 1u) << "only the real agent";
  EXPECT_TRUE(controller.take_events().empty()) << "nothing forged reached the supervisor";
  // The real agent is untouched by all of it.
  drive(0.2);
  EXPECT_TRUE(controller.agent(2)->connected);
  EXPECT_EQ(controller.agent(2)->summary->ranks, 4);
}

TEST(AgentWire, AnAgentActsOnNothingForged) {
  // A listener posing as the controller without the secret: its Welcome
  // fails the agent's check, so the agent never takes a command from it.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  ControllerLink link("127.0.0.1", ntohs(a.sin_port), secret_of(7), 1, "h1");
  std::vector<wire::Message> taken;
  int peer = -1;
  for (int i = 0; i < 100 && peer < 0; ++i) {
    link.tick(now_s());
    link.on_writable(now_s());
    peer = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(peer, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  link.on_writable(now_s());
  const std::string hello = read_for(peer, 0.1);
  ASSERT_GT(hello.size(), 4u);
  wire::Channel impostor(wire::Channel::Role::kController, secret_of(8));
  const auto opened = impostor.open(hello.substr(4));
  EXPECT_EQ(opened.drop, wire::Drop::kBadMac) << "the impostor cannot read the Hello's proof either";
  const auto h = wire::decode_unchecked(hello.substr(4));
  ASSERT_TRUE(h);
  send_all(peer, impostor.seal(wire::Welcome{.agent_nonce = std::get<wire::Hello>(*h).agent_nonce,
                                             .controller_nonce = {}, .summary_interval_ms = 100,
                                             .controller_lost_ms = 1000, .epoch = 1}));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (const auto& m : link.on_readable(now_s())) taken.push_back(m);
  EXPECT_TRUE(taken.empty());
  EXPECT_FALSE(link.welcomed());
  EXPECT_GE(link.dropped(), 1u);
  ::close(peer);
  ::close(listener);
}

TEST(AgentWire, AnAgentWithoutAControllerRetriesCalmly) {
  // htrun gone: its port refuses. The agent's loop (tick, wait for the
  // socket, on_writable) must try again every retry interval, not at once:
  // a refused connect retried in a loop once spun a detached agent at a
  // core's worth of system calls until it gave up.
  const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(closed, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(closed, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(closed);  // nobody listens there now
  ControllerLink link("127.0.0.1", ntohs(a.sin_port), secret_of(7), 1, "h1");
  int attempts = 0;
  const double start = now_s();
  while (now_s() - start < 1.0) {
    const bool had = link.fd() >= 0;
    link.tick(now_s(), 0.2);
    if (!had && link.fd() >= 0) ++attempts;
    pollfd p{.fd = link.fd(), .events = short(link.want_write() ? POLLOUT : POLLIN), .revents = 0};
    ::poll(&p, link.fd() >= 0 ? 1 : 0, 10);
    if (link.fd() >= 0 && (p.revents & (POLLOUT | POLLERR | POLLHUP))) link.on_writable(now_s());
  }
  EXPECT_GE(attempts, 2) << "it must keep trying";
  EXPECT_LE(attempts, 11) << "one try per 0.1-0.3 s (the retry interval, jittered), not a loop";
  EXPECT_FALSE(link.welcomed());
  // Every try refused since the first: htrun has ended there (the agent leaves).
  EXPECT_GT(link.refused_since_s(), 0);
  EXPECT_LT(link.refused_since_s() - start, 0.1);
}

TEST(AgentChannelMessages, ReadBack) {
  using namespace ht::resilience;
  const Heartbeat beat{.rank = 3, .host = "h", .pid = 9, .step = 4, .phase = Phase::kOptimizer, .time_ms = 5,
                       .progress_ms = 4, .epoch = 2};
  const auto b = parse_agent_message(format_agent_message(beat));
  ASSERT_TRUE(b && std::holds_alternative<Heartbeat>(*b));
  EXPECT_EQ(std::get<Heartbeat>(*b).phase, Phase::kOptimizer);
  const auto f = parse_agent_message(format_agent_message(Fence{7}));
  ASSERT_TRUE(f && std::holds_alternative<Fence>(*f));
  EXPECT_EQ(std::get<Fence>(*f).epoch, 7);
  const auto e = parse_agent_message(format_agent_message(ExitRecord{.rank = 1, .code = 76, .kind = ExitKind::kDivergence}));
  ASSERT_TRUE(e && std::holds_alternative<ExitRecord>(*e));
  EXPECT_EQ(std::get<ExitRecord>(*e).code, 76);
  EXPECT_FALSE(parse_agent_message(R"({"type":"beat","rank":1})")) << "a beat without its fields";
  EXPECT_FALSE(parse_agent_message(R"({"type":"fence"})"));
  EXPECT_FALSE(parse_agent_message(R"({"type":"other"})"));
  EXPECT_FALSE(parse_agent_message("not json"));
  EXPECT_EQ(agent_socket_path("/tmp/d", "h1"), "/tmp/d/h1.sock");
}

}  // namespace
}  // namespace htrun
