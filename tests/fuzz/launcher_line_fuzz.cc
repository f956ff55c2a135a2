// Fuzz target: a line of the launcher's output as htrun reads it for a rank
// killed or a host lost (htrun::Cluster::launcher_event), for every kind of
// node set. Anything may come out of mpirun, srun or ssh: nothing may throw
// or crash, and what is found must be a rank >= 0 or a host without spaces.
// The input's first byte picks the node set, the rest is the line.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_input.h"
#include "htrun/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const htrun::Cluster clusters[] = {htrun::Cluster::of_kind(htrun::ClusterKind::kLocal),
                                            htrun::Cluster::of_kind(htrun::ClusterKind::kHostfile),
                                            htrun::Cluster::of_kind(htrun::ClusterKind::kSlurm)};
  const std::string_view line = ht::fuzz::as_text(data + 1, size - 1);
  const htrun::LauncherEvent e = clusters[data[0] % 3].launcher_event(std::string(line.substr(0, line.find('\n'))));
  if (e.rank < -1) throw std::logic_error("launcher_event found a negative rank");
  if (e.host.find_first_of(" \t") != std::string::npos) throw std::logic_error("launcher_event found a host with spaces");
  return 0;
}
