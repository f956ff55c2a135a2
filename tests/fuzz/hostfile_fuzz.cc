// Fuzz target: an Open MPI hostfile as htrun reads it
// (htrun::Cluster::from_hostfile; src/tools/htrun/cluster.cc is compiled in).
// htrun reports a bad hostfile as std::runtime_error("htrun: ..."); any other
// exception is a finding.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_input.h"
#include "htrun/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = ht::fuzz::write_scratch_file("hostfile", ht::fuzz::as_text(data, size));
  try {
    int slots = 0;
    const htrun::Cluster c = htrun::Cluster::from_hostfile(path, &slots);
    if (slots < 1) throw std::logic_error("from_hostfile accepted slots < 1");
    (void)c.describe();
    (void)c.job_command(c.nodes(), slots, {"prog"}, {});
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).rfind("htrun: ", 0) != 0) throw;
  }
  return 0;
}
