// ht::resilience::RankGuard on a clock of the test's own: its watchdog's
// rule, and the guard's thread firing it (and only then) as that clock
// moves; its heartbeats carry that clock; under a node agent the records go
// to the agent's socket, not the run directory.
#include "ht/resilience/rank_guard.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace ht::resilience {
namespace {

namespace fs = std::filesystem;

TEST(Watchdog, FiresOnlyAfterItsTimeWithoutProgressInAStep) {
  EXPECT_FALSE(watchdog_expired(0, 3, Phase::kData, 1000, 1999, 1000)) << "within its time";
  EXPECT_FALSE(watchdog_expired(0, 3, Phase::kData, 1000, 2000, 1000)) << "at its time";
  const auto m = watchdog_expired(2, 3, Phase::kGradientReduction, 1000, 2500, 1000);
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, "watchdog: rank 2 made no progress for 1.5 s in step 3 (gradient-reduction)");
  EXPECT_FALSE(watchdog_expired(0, 0, Phase::kStart, 0, 1000000, 1000)) << "start-up is the supervisor's";
  EXPECT_FALSE(watchdog_expired(0, 3, Phase::kData, 0, 1000000, 0)) << "off";
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("rank_guard_test_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(dir);
    ::unsetenv(kEnvAgentDir);
    ::unsetenv(kEnvLaunchEpoch);
  }
  ~Scratch() { fs::remove_all(dir); }
};

template <class Pred>
bool eventually(Pred pred, double seconds = 5) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(RankGuardClock, TheWatchdogFiresOnTheGuardsClock) {
  Scratch scratch;
  std::atomic<std::int64_t> clock{1'000'000};
  std::mutex mu;
  std::vector<std::pair<int, std::string>> fired;
  GuardOptions o;
  o.run_dir = scratch.dir.string();
  o.heartbeat = std::chrono::milliseconds(20);
  o.watchdog = std::chrono::milliseconds(1000);
  o.clock_ms = [&] { return clock.load(); };
  o.on_watchdog = [&](int code, const std::string& message) {
    std::lock_guard lock(mu);
    fired.emplace_back(code, message);
  };
  RankGuard guard(o, 3);
  guard.progress(7, Phase::kData);
  // Real time passes, the guard's clock does not: nothing fires.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  clock += 999;
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(fired.empty());
  }
  clock += 201;
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mu);
    return !fired.empty();
  })) << "the watchdog never fired on the guard's clock";
  std::lock_guard lock(mu);
  EXPECT_EQ(fired.front().first, kExitHang);
  EXPECT_EQ(fired.front().second, "watchdog: rank 3 made no progress for 1.2 s in step 7 (data)");
}

TEST(RankGuardClock, HeartbeatsCarryTheGuardsClock) {
  Scratch scratch;
  GuardOptions o;
  o.run_dir = scratch.dir.string();
  o.heartbeat = std::chrono::milliseconds(20);
  std::atomic<std::int64_t> clock{42'000};
  o.clock_ms = [&] { return clock.load(); };
  RankGuard guard(o, 1);
  guard.progress(2, Phase::kOptimizer);
  std::optional<Heartbeat> beat;
  ASSERT_TRUE(eventually([&] {
    clock += 5;  // beats come due on the guard's clock, not the wall's
    std::ifstream in(heartbeat_path(o.run_dir, 1));
    std::stringstream text;
    text << in.rdbuf();
    beat = parse_heartbeat(text.str());
    return beat && beat->phase == Phase::kOptimizer;
  }));
  EXPECT_GT(beat->time_ms, 42'000);
  EXPECT_LE(beat->time_ms, clock.load());
  EXPECT_EQ(beat->progress_ms, 42'000) << "when the phase changed";
  EXPECT_EQ(beat->step, 2);
}

// A node agent's socket, played by the test: the guard's heartbeats and
// exit record arrive there, and nothing lands in the run directory.
TEST(RankGuardAgent, RecordsGoToTheAgentNotTheRunDirectory) {
  Scratch scratch;
  const fs::path agent_dir = scratch.dir / "agent";
  fs::create_directories(agent_dir);
  const std::string path = agent_socket_path(agent_dir.string(), agent_label(0));
  const int listener = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ::setenv(kEnvAgentDir, agent_dir.c_str(), 1);
  std::vector<AgentMessage> received;
  int peer = -1;
  {
    GuardOptions o;
    o.run_dir = (scratch.dir / "run").string();
    o.heartbeat = std::chrono::milliseconds(20);
    RankGuard guard(o, 0);
    peer = ::accept(listener, nullptr, nullptr);
    ASSERT_GE(peer, 0);
    guard.progress(1, Phase::kForwardBackward);
    guard.record_exit(kExitDivergence, "loss is nan");
    timeval tv{0, 200000};
    ::setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buffer[4096];
    for (int i = 0; i < 50; ++i) {
      const ssize_t n = ::recv(peer, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      if (auto m = parse_agent_message(std::string_view(buffer, std::size_t(n)))) received.push_back(*m);
      if (!received.empty() && std::holds_alternative<ExitRecord>(received.back())) break;
    }
  }  // the guard ends first: a rank whose agent's end closes leaves at once
  ::close(peer);
  ::unsetenv(kEnvAgentDir);
  ::close(listener);
  ASSERT_FALSE(received.empty());
  EXPECT_TRUE(std::holds_alternative<Heartbeat>(received.front())) << "the first beat, from the guard's first moment";
  ASSERT_TRUE(std::holds_alternative<ExitRecord>(received.back()));
  EXPECT_EQ(std::get<ExitRecord>(received.back()).code, kExitDivergence);
  EXPECT_EQ(std::get<ExitRecord>(received.back()).message, "loss is nan");
  EXPECT_FALSE(fs::exists(heartbeat_dir((scratch.dir / "run").string())));
  EXPECT_FALSE(fs::exists(exit_record_dir((scratch.dir / "run").string())));
}

}  // namespace
}  // namespace ht::resilience
