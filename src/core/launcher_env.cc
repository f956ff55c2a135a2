// The launcher's environment, read in one place.
#include "ht/core/launcher_env.h"

#include <cstdlib>
#include <initializer_list>

namespace ht {
namespace {

/// The first of `names` that is set to a whole number in [lo, 2^20), or -1.
int first_number(std::initializer_list<const char*> names, long lo) {
  for (const char* name : names)
    if (const char* s = std::getenv(name); s && *s) {
      char* end = nullptr;
      const long v = std::strtol(s, &end, 10);
      if (*end == '\0' && v >= lo && v < (1 << 20)) return int(v);
    }
  return -1;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

int launcher_rank() { return first_number({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}, 0); }

int launcher_local_rank() {
  const int r = first_number({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"}, 0);
  return r < 0 ? 0 : r;
}

int launcher_local_size(int otherwise) {
  const int n = first_number({"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"}, 1);
  return n < 0 ? otherwise : n;
}

}  // namespace ht
