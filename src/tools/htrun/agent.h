// ht-agent: htrun's node agent, one per host per job. It watches the host's
// ranks directly (each speaks to it over a Unix socket only the job's owner
// may use: heartbeats, exit records; a socket that closes with no record is
// a rank that died), sends the controller a summary of them every interval
// and their exits and deaths at once, and carries out the controller's
// commands: end the ranks of a launch given up, pass on a signal, run a
// health check. It connects out to the controller, reconnects after a
// dropped connection, and ends its ranks by itself when it has been without
// the controller longer than the controller allows (no orphan goes on
// writing the run directory). docs/htrun.md, "Node agents".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include "htrun/controller_link.h"
#include "htrun/rank_board.h"

namespace htrun {

struct AgentOptions {
  int node = -1;
  /// The label its ranks find it by (ht::resilience::agent_label).
  std::string label;
  /// The socket's directory (HT_AGENT_DIR): made 0700 if missing, refused
  /// unless it is the agent's owner's alone.
  std::string socket_dir;
  std::string controller_host;
  int controller_port = 0;
  wire::Secret secret{};
  /// The run directory: while the controller is out of reach, the agent
  /// reads its launch epoch, and ends at once the ranks of a launch that a
  /// newer one superseded (a host cut off from htrun but not from the
  /// shared file system). "": none.
  std::string run_dir;
  /// Seconds without the controller after which the agent exits (its ranks
  /// ended long before, at the Welcome's controller_lost_ms).
  double linger_s = 300;
};

/// Makes `dir` (mode 0700) if it is missing; throws std::runtime_error
/// unless it is then a directory of this user's that no one else may enter.
void prepare_private_dir(const std::string& dir);

/// Thrown by Agent's constructor when another agent already answers at its
/// socket (an agent of this host that outlived a cut, started again): that
/// one goes on, this one has nothing to do.
class AgentAlreadyRuns : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Agent {
 public:
  /// Listens on its ranks' socket at once (throws std::runtime_error when it
  /// cannot, AgentAlreadyRuns when another agent answers there).
  explicit Agent(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs until the controller says Bye (0) or has been gone for linger_s (1).
  int run();

 private:
  struct RankConnection {
    int fd = -1;
    pid_t pid = 0;
    int rank = -1;
    std::int64_t epoch = 0;
    bool exited = false;  // its exit record came
  };
  struct HealthRun {
    std::uint32_t request = 0;
    pid_t pid = 0;
    int out_fd = -1;
    double deadline_s = 0;
    std::string tail;
  };
  struct PendingAck {
    std::uint32_t request = 0;
    std::int64_t epoch = 0;  // the command's
    std::int64_t until = 0;  // acknowledged once no rank of this epoch or older is left
  };

  double now() const;
  void accept_ranks();
  void read_rank(RankConnection& r);
  void rank_gone(RankConnection& r);
  void command(const wire::Message& m);
  /// KILLs every rank of `epoch` or older (all: epoch < 0).
  void end_ranks(std::int64_t epoch);
  int ranks_left(std::int64_t epoch) const;
  void start_health(const wire::HealthCheck& check);
  void poll_health();
  void send_acks();

  AgentOptions options_;
  std::string socket_path_;
  int listen_fd_ = -1;
  ControllerLink link_;
  RankBoard board_;
  std::vector<RankConnection> ranks_;
  std::vector<HealthRun> health_;
  std::vector<PendingAck> acks_;
  double next_summary_s_ = 0;
  double next_epoch_look_s_ = 0;
  bool ended_for_loss_ = false;  // its ranks ended since the controller was lost
  bool bye_ = false;
  std::uint64_t refused_peers_ = 0;  // connections of another user
};

}  // namespace htrun
