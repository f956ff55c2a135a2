// ht::resilience::RankGuard.
#include "ht/resilience/rank_guard.h"

#include "ht/core/launcher_env.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/files.h"
#include "ht/comm/work.h"
#include "ht/core/error.h"
#include "resilience/agent_channel.h"

namespace ht::resilience {
namespace {

namespace fs = std::filesystem;

volatile std::sig_atomic_t g_preempt = 0;
void on_preempt(int) { g_preempt = 1; }

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Writes `text` to `path` through a temporary file and a rename: readers see
// the old or the new contents, never half of one.
void write_atomically(const std::string& path, const std::string& text) {
  try {
    ht::detail::write_file_replacing(path, text, /*sync=*/false, "record");
  } catch (const std::exception&) {
    // The next write tries again; a missing record is what htrun judges by.
  }
}

}  // namespace

std::int64_t launch_epoch() {
  const char* value = std::getenv(kEnvLaunchEpoch);
  if (!value || !*value) return 0;
  char* end = nullptr;
  errno = 0;
  const long long epoch = std::strtoll(value, &end, 10);
  HT_CHECK(*end == '\0' && errno == 0 && epoch >= 0, ErrorKind::kConfig,
           "HT_LAUNCH_EPOCH='{}' is not a launch number >= 0 (htrun sets it); unset it outside htrun", value);
  return epoch;
}

std::int64_t run_dir_epoch(const std::string& run_dir) {
  std::ifstream in(launch_epoch_path(run_dir));
  long long epoch = 0;
  return in >> epoch ? std::int64_t(epoch) : 0;
}

bool superseded(std::int64_t epoch, const std::string& run_dir) {
  return epoch > 0 && run_dir_epoch(run_dir) > epoch;
}

std::string node_label(int world_rank) {
  const char* simulated = std::getenv(kEnvSimulatedNodes);
  if (!simulated || !*simulated) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    return host;
  }
  const std::string spec = simulated;
  const auto colon = spec.find(':');
  std::vector<std::string> ids;
  int slots = 0;
  try {
    slots = colon == std::string::npos ? 0 : std::stoi(spec.substr(0, colon));
    for (std::size_t at = colon + 1; colon != std::string::npos && at <= spec.size();) {
      const auto comma = std::min(spec.find(',', at), spec.size());
      ids.push_back(std::to_string(std::stoi(spec.substr(at, comma - at))));
      at = comma + 1;
    }
  } catch (const std::exception&) {
    ids.clear();
  }
  HT_CHECK(slots > 0 && !ids.empty() && world_rank / slots < int(ids.size()), ErrorKind::kConfig,
           "HT_SIMULATED_NODES='{}' does not place rank {}: it is '<ranks per node>:<node id>,<node id>,...' (htrun "
           "sets it for simulated nodes); unset it on real machines",
           spec, world_rank);
  return "node" + ids[std::size_t(world_rank / slots)];
}

std::string host_label() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm && *slurm) return slurm;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::string agent_label(int world_rank) {
  const char* simulated = std::getenv(kEnvSimulatedNodes);
  return simulated && *simulated ? node_label(world_rank) : host_label();
}

std::optional<std::string> watchdog_expired(int rank, std::int64_t step, Phase phase, std::int64_t last_change_ms,
                                            std::int64_t now_ms, std::int64_t watchdog_ms) {
  // Steps only: start-up (MPI, data, model, checkpoint load) can be long,
  // and the supervisor's start timeout covers it.
  if (watchdog_ms <= 0 || step <= 0 || now_ms - last_change_ms <= watchdog_ms) return std::nullopt;
  return fmt::format("watchdog: rank {} made no progress for {:.1f} s in step {} ({})", rank,
                     double(now_ms - last_change_ms) / 1000.0, step, phase_name(phase));
}

RankGuard::RankGuard(const GuardOptions& options, int rank)
    : options_(options), rank_(rank), epoch_(launch_epoch()) {
  if (!options_.clock_ms) options_.clock_ms = wall_ms;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  host_ = host;
  if (const char* dir = std::getenv(kEnvAgentDir); dir && *dir) {
    // Under htrun's node agent: the records go to it, nothing per rank to
    // the run directory. An agent that does not answer leaves the files.
    std::string error;
    if (auto channel = detail::AgentChannel::connect(agent_socket_path(dir, agent_label(rank)), 5.0, &error))
      agent_ = std::make_unique<detail::AgentChannel>(std::move(*channel));
    else
      std::fprintf(stderr, "[rank %d] warning: %s; heartbeats go to %s\n", rank_, error.c_str(),
                   heartbeat_dir(options_.run_dir).c_str());
  }
  if (!agent_) {
    // A directory that cannot be made shows as a heartbeat that cannot be written.
    ht::detail::make_directories(heartbeat_dir(options_.run_dir));
    ht::detail::make_directories(exit_record_dir(options_.run_dir));
    std::error_code ec;
    fs::remove(exit_record_path(options_.run_dir, rank_), ec);
  }
  last_change_ms_ = now_ms();
  std::signal(SIGTERM, on_preempt);
  std::signal(SIGUSR1, on_preempt);
  write_heartbeat();
  thread_ = std::thread([this] { heartbeat_loop(); });
}

RankGuard::~RankGuard() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  // The agent takes a channel that closes with no record for a crash.
  if (agent_ && !exit_recorded_)
    agent_->send(ExitRecord{.rank = rank_,
                            .code = kExitOk,
                            .kind = ExitKind::kOk,
                            .step = step_.load(),
                            .phase = Phase(phase_.load()),
                            .time_ms = now_ms(),
                            .message = "finished",
                            .blamed_ranks = {},
                            .epoch = epoch_});
}

void RankGuard::progress(std::int64_t step, Phase phase) {
  step_ = step;
  phase_ = int(phase);
  last_change_ms_ = now_ms();
}

bool RankGuard::preempt_requested() const { return g_preempt != 0; }

void RankGuard::write_heartbeat() {
  const Heartbeat beat{.rank = rank_,
                       .host = host_,
                       .pid = int(::getpid()),
                       .step = step_.load(),
                       .phase = Phase(phase_.load()),
                       .time_ms = now_ms(),
                       .progress_ms = last_change_ms_.load(),
                       .epoch = epoch_,
                       .comm_wait_ms = comm::blocked_wait_ns() / 1'000'000};
  if (agent_) agent_->send(beat);  // a lost agent is check_agent's
  else write_atomically(heartbeat_path(options_.run_dir, rank_), format_heartbeat(beat) + "\n");
}

void RankGuard::check_agent() {
  bool gone = false;
  const std::optional<std::int64_t> fence = agent_->fenced(&gone);
  if (!gone && !(fence && *fence > epoch_)) return;
  if (gone)
    std::fprintf(stderr, "[rank %d] fenced: its node agent is gone, so nothing watches it any more; exiting\n", rank_);
  else
    std::fprintf(stderr, "[rank %d] fenced: launch %lld was superseded by launch %lld; exiting\n", rank_,
                 (long long)epoch_, (long long)*fence);
  std::fflush(stderr);
  std::_Exit(kExitFenced);
}

void RankGuard::heartbeat_loop() {
  std::int64_t next = now_ms() + options_.heartbeat.count();
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::int64_t now = now_ms();
    if (const auto message = watchdog_expired(rank_, step_.load(), Phase(phase_.load()), last_change_ms_.load(), now,
                                              options_.watchdog.count())) {
      if (!options_.on_watchdog) exit(kExitHang, *message);
      options_.on_watchdog(kExitHang, *message);
    }
    if (agent_) check_agent();
    if (now >= next) {
      // Given up by the supervisor: a newer launch owns the run directory.
      // Leave without a record (the directory is the new launch's).
      if (!agent_ && superseded(epoch_, options_.run_dir)) {
        std::fprintf(stderr, "[rank %d] fenced: launch %lld was superseded by launch %lld in %s; exiting\n", rank_,
                     (long long)epoch_, (long long)run_dir_epoch(options_.run_dir), options_.run_dir.c_str());
        std::fflush(stderr);
        std::_Exit(kExitFenced);
      }
      write_heartbeat();
      next = now + options_.heartbeat.count();
    }
  }
}

void RankGuard::record_exit(int code, const std::string& message, const std::vector<int>& blamed) {
  std::fprintf(stderr, "[rank %d] %s: %s\n", rank_, exit_kind(code).c_str(), message.c_str());
  const ExitRecord record{.rank = rank_,
                          .code = code,
                          .kind = exit_kind_of(code),
                          .step = step_.load(),
                          .phase = Phase(phase_.load()),
                          .time_ms = now_ms(),
                          .message = message,
                          .blamed_ranks = blamed,
                          .epoch = epoch_};
  if (agent_) {
    agent_->send(record);  // the agent drops a superseded launch's record
  } else {
    if (superseded(epoch_, options_.run_dir)) return;  // the record would be the new launch's to read
    write_atomically(exit_record_path(options_.run_dir, rank_), format_exit_record(record) + "\n");
  }
  exit_recorded_ = true;
}

void RankGuard::exit(int code, const std::string& message, const std::vector<int>& blamed) {
  if (!exit_recorded_) record_exit(code, message, blamed);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace ht::resilience
