// Fuzz target: SLURM_TASKS_PER_NODE as htrun parses it
// (htrun::slurm_tasks_per_node, what Cluster::from_slurm calls). The node list
// itself (SLURM_JOB_NODELIST) is expanded by `scontrol show hostnames`, an
// external program, and is not parsed in-process. The input is the
// variable's value up to its first NUL.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_input.h"
#include "htrun/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = ht::fuzz::as_text(data, size);
  try {
    const int slots = htrun::slurm_tasks_per_node(std::string(bytes.substr(0, bytes.find('\0'))));
    if (slots < 1) throw std::logic_error("slurm_tasks_per_node returned a count < 1");
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).rfind("htrun: ", 0) != 0) throw;
  }
  return 0;
}
