// htrun's end of its node agents (wire.h): one TCP listener, one connection
// per agent, and an epoll loop that the supervisor turns (poll). Each
// agent's newest summary is kept per node and its other messages (exit
// records, deaths, health results, acknowledgements) are queued as events,
// so the supervisor's work per interval grows with hosts, not ranks. Only
// frames that pass the channel's check count; the rest are dropped and
// counted by why (ControllerCounts). Not thread-safe: one thread polls.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "htrun/wire.h"

namespace htrun {

struct ControllerOptions {
  std::string bind_address = "0.0.0.0";
  int port = 0;  // 0: any free port (port() says which)
  wire::Secret secret{};
  int summary_interval_ms = 500;
  /// How long an agent may be without the controller before it ends its
  /// ranks by itself (Welcome::controller_lost_ms).
  int controller_lost_ms = 10000;
  /// A connection that has not proven itself (a frame under the session
  /// key) this long after it was accepted is closed.
  double handshake_timeout_s = 5;
};

/// What the controller knows of the agent of one node.
struct AgentState {
  bool connected = false;  // an established connection is open
  double connected_s = 0;  // when it was established
  double heard_s = 0;      // the last frame that passed its check
  double lost_s = 0;       // when the established connection closed (0: open, or never was)
  std::string host;        // as its Hello said
  int pid = 0;
  std::optional<wire::Summary> summary;  // the newest
};

/// A message of an agent other than a summary, as it arrived.
struct AgentEvent {
  int node = -1;
  double at_s = 0;  // when it arrived (the controller's clock)
  wire::Message message;
};

struct ControllerCounts {
  std::uint64_t accepted = 0;      // connections
  std::uint64_t established = 0;   // connections that proved themselves
  std::uint64_t frames = 0;        // frames taken
  std::uint64_t summaries = 0;
  std::uint64_t bytes_read = 0;
  /// Frames dropped, by wire::Drop (kMalformed, kBadMac, kReplayed, kUnexpected).
  std::array<std::uint64_t, 5> dropped{};
  std::uint64_t broken_streams = 0;     // a length out of range: the connection closed
  std::uint64_t handshake_timeouts = 0;
  std::uint64_t dropped_total() const;
};

class Controller {
 public:
  /// Listens at once. `clock` gives the times it records (the supervisor's).
  Controller(ControllerOptions options, std::function<double()> clock);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  int port() const { return port_; }
  const ControllerOptions& options() const { return options_; }
  /// Accepts, reads and writes for up to `timeout_s` (0: what is ready now).
  void poll(double timeout_s);
  /// The events since the last call, in arrival order.
  std::vector<AgentEvent> take_events();
  /// The agent of `node`; nullptr when none ever connected.
  const AgentState* agent(int node) const;
  /// Sends to the agent of `node`: false when it has no established connection.
  bool send(int node, const wire::Message& message);
  /// Closes the agent's connection (a node declared lost must not speak for
  /// it again until it reconnects and proves itself anew).
  void disconnect(int node);
  /// A fresh request number for a command.
  std::uint32_t next_request() { return ++request_; }
  /// The launch epoch new agents are told in their Welcome.
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  const ControllerCounts& counts() const { return counts_; }

 private:
  struct Connection;
  void accept_all();
  void read(Connection& c);
  void handle(Connection& c, wire::Message message);
  void write(Connection& c);
  void close(int fd);
  void expire_handshakes();

  ControllerOptions options_;
  std::function<double()> clock_;
  int listen_fd_ = -1, epoll_fd_ = -1, port_ = 0;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;  // by fd
  std::unordered_set<int> unproven_;                                   // fds of connections not yet established
  double next_expiry_s_ = 0;
  std::unordered_map<int, int> node_fd_;        // node -> its established connection's fd
  std::unordered_map<int, AgentState> agents_;  // by node
  std::vector<AgentEvent> events_;
  ControllerCounts counts_;
  std::uint32_t request_ = 0;
  std::int64_t epoch_ = 0;
};

}  // namespace htrun
