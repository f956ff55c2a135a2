// htrun's reading of its launcher's output: which lines name a rank killed
// or a host lost, for each kind of node set, and which name nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "htrun/cluster.h"

namespace htrun {
namespace {

LauncherEvent read(ClusterKind kind, const std::string& line) { return Cluster::of_kind(kind).launcher_event(line); }

TEST(LauncherEvent, RanksKilled) {
  EXPECT_EQ(read(ClusterKind::kLocal,
                 "mpirun noticed that process rank 2 with PID 123 on node vm exited on signal 9 (Killed).")
                .rank,
            2);
  EXPECT_EQ(read(ClusterKind::kHostfile,
                 "mpirun noticed that process rank 0 with PID 9 on node h1 exited on signal 11 (Segmentation fault).")
                .rank,
            0);
  EXPECT_EQ(read(ClusterKind::kSlurm, "srun: error: n1: task 3: Killed").rank, 3);
  EXPECT_EQ(read(ClusterKind::kSlurm, "srun: error: n1: tasks 4-5: Terminated").rank, -1)
      << "the tasks srun ends after the first are its doing, not a cause";
  EXPECT_EQ(read(ClusterKind::kLocal, "process rank 99999999999999999999 with PID 1 on node x exited on signal 9").rank,
            -1)
      << "no launcher prints such a rank";
}

TEST(LauncherEvent, HostsLost) {
  for (const auto& [line, host] : std::vector<std::pair<std::string, std::string>>{
           {"  Peer host:  h2", "h2"},
           {"Connection to h2 closed by remote host.", "h2"},
           {"Timeout, server h3 not responding.", "h3"},
           {"ssh: connect to host node-7.cluster port 22: No route to host", "node-7.cluster"},
           {"  Remote daemon: [[1234,0],2] on node h2", "h2"}})
    EXPECT_EQ(read(ClusterKind::kHostfile, line).host, host) << line;
  EXPECT_EQ(read(ClusterKind::kSlurm, "srun: error: Node failure on n2").host, "n2");
  EXPECT_EQ(read(ClusterKind::kLocal, "  Peer host:  vm").host, "")
      << "simulated nodes share one host: a peer's host names no node";
}

TEST(LauncherEvent, OrdinaryLinesNameNothing) {
  for (const std::string line : {"step 12/100 | loss 3.4512", "# checkpoint of step 300 committed", "",
                                 "Peer host names are in the log", "the host h2 was fine"}) {
    const LauncherEvent e = read(ClusterKind::kHostfile, line);
    EXPECT_EQ(e.rank, -1) << line;
    EXPECT_EQ(e.host, "") << line;
  }
}

// The ranks on other machines get only the variables mpirun names with -x:
// the launch's epoch and communication timeout must be among them, or a
// cut-off rank of an old launch would not fence itself.
TEST(JobCommand, HostfileExportsTheLaunchVariables) {
  const std::filesystem::path hostfile =
      std::filesystem::temp_directory_path() / ("launcher_event_test_" + std::to_string(::getpid()));
  std::ofstream(hostfile) << "h1 slots=2\nh2 slots=2\n";
  int slots = 0;
  const Cluster c = Cluster::from_hostfile(hostfile.string(), &slots);
  std::filesystem::remove(hostfile);
  ASSERT_EQ(slots, 2);
  const std::vector<std::string> cmd =
      c.job_command(c.nodes(), slots, {"prog"}, {}, {"HT_LAUNCH_EPOCH=3", "HT_COMM_TIMEOUT=10"});
  auto exported = [&](const std::string& name) {
    for (std::size_t i = 0; i + 1 < cmd.size(); ++i)
      if (cmd[i] == "-x" && cmd[i + 1] == name) return true;
    return false;
  };
  EXPECT_TRUE(exported("HT_LAUNCH_EPOCH"));
  EXPECT_TRUE(exported("HT_COMM_TIMEOUT"));
  EXPECT_EQ(cmd.back(), "prog");
}

}  // namespace
}  // namespace htrun
