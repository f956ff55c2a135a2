// A rank's end of its node agent's socket (ht/resilience/run_protocol.h,
// "the node agent's channel"): heartbeats and exit records out, a fence in.
// RankGuard owns one when htrun runs the rank under an agent (HT_AGENT_DIR).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ht/resilience/run_protocol.h"

namespace ht::resilience::detail {

class AgentChannel {
 public:
  /// Connects to the agent listening at `socket_path`, trying for up to
  /// `wait_s` (the agent may be starting). nullopt, with `error` saying
  /// why, when none answers.
  static std::optional<AgentChannel> connect(const std::string& socket_path, double wait_s, std::string* error);
  AgentChannel(AgentChannel&& other) noexcept;
  AgentChannel& operator=(AgentChannel&& other) noexcept;
  ~AgentChannel();

  /// Sends one message; never blocks for long (a full queue is retried for
  /// up to 0.5 s). False when the agent is gone (its end closed) or the
  /// message could not be sent.
  bool send(const AgentMessage& message);
  /// The epoch of a fence the agent sent, if one is waiting; never blocks.
  /// Sets `gone` when the agent's end has closed.
  std::optional<std::int64_t> fenced(bool* gone);

 private:
  explicit AgentChannel(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace ht::resilience::detail
