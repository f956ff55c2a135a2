// htrun's reachability watch: a TCP connect to each host's port (ssh's, or
// slurmd's) every few tenths of a second, never blocking. An answer (the
// connection accepted, or refused) shows that the host's network and kernel
// are up, however busy its processes are; no answer (a connect that does
// not complete in time, no route) shows a host cut off or gone. A port that
// accepted and then refuses shows its daemon gone: on a host whose
// processes all died, the kernel still answers, with a reset. A partition
// is seen this way within about a second, long before the ranks'
// collectives time out or the launcher's ssh keep-alives give up.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

namespace htrun {

/// What the probes of one host have seen so far (times in seconds since the
/// epoch, the supervisor's clock).
struct ProbeState {
  double last_answer_s = 0;  // when it last answered; 0: never
  /// When the oldest probe not answered since then was sent; 0: none is out.
  double silent_since_s = 0;
  int missed = 0;  // probes since the last answer that expired unanswered
  /// Whether the port ever accepted a probe: a daemon listened there.
  bool accepted = false;
  /// Refusals in a row since the last accepted probe, and when the first of
  /// them came (0: none). A port that accepted and now refuses: the daemon
  /// behind it is gone, though the host's kernel answers.
  int refused = 0;
  double refused_since_s = 0;
};

/// Probes expired unanswered in a row before a host counts as not
/// answering (one lost SYN is not a partition).
inline constexpr int kProbesMissedToCut = 2;

class HostProbe {
 public:
  /// Probes `hosts` (names resolved once, here) on `port`: a new connect
  /// to each every `interval_s`, each given up after `expire_s`.
  HostProbe(const std::vector<std::string>& hosts, int port, double interval_s = 0.2, double expire_s = 0.5);
  ~HostProbe();
  HostProbe(const HostProbe&) = delete;
  HostProbe& operator=(const HostProbe&) = delete;

  /// One look, at `now_s`: takes the answers of connects that completed,
  /// gives up those out for `expire_s`, sends those due. Never blocks.
  void poll(double now_s);
  /// Each host's state, in the order given.
  std::vector<ProbeState> states() const;
  /// The hosts whose names did not resolve: never probed.
  std::vector<std::string> unresolved() const;

 private:
  struct Target {
    std::string host;
    sockaddr_storage address{};
    socklen_t address_len = 0;  // 0: the name did not resolve
    int fd = -1;                // the connect out, if any
    double sent_at = 0;
    ProbeState state;
  };
  void send(Target& t, double now_s);
  static void answered(Target& t, double now_s, bool refused);
  static void missed(Target& t);

  std::vector<Target> targets_;
  double interval_s_, expire_s_;
};

}  // namespace htrun
