// What a line of the launcher's output (mpirun, srun, ssh beneath them) says
// of a failure: a rank killed, or a host lost (Cluster::launcher_event).
#pragma once

#include <string>

namespace htrun {

struct LauncherEvent {
  int rank = -1;      // a rank killed by a signal
  std::string host;   // a host lost: its daemon or connection gone, unreachable, or failed
  double time_s = 0;  // when the line was read (seconds since the epoch)
};

}  // namespace htrun
