// MpiRuntime: MPI initialisation with MPI_THREAD_MULTIPLE, owned finalisation.
#include "ht/comm/mpi_runtime.h"

#include <fmt/format.h>

#include "comm/mpi_handles.h"
#include "core/mpi_check.h"

namespace ht::comm {
namespace {

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return fmt::format("level {}", level);
}

}  // namespace

bool mpi_is_initialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  HT_MPI_CHECK(MPI_Initialized(&initialized));
  HT_MPI_CHECK(MPI_Finalized(&finalized));
  HT_CHECK(!finalized, ErrorKind::kConfig, "MPI has already been finalised in this process; it cannot be restarted");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    HT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_ = true;
  } else {
    HT_MPI_CHECK(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_) MPI_Finalize();
    owns_ = false;
    throw Error(ErrorKind::kConfig,
                fmt::format("MPI provides only {} but hypertrain's communicators call MPI from their own threads and "
                            "need MPI_THREAD_MULTIPLE: {}",
                            thread_level_name(provided),
                            initialized ? "initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let "
                                          "ht::comm::MpiRuntime initialise it"
                                        : "use an MPI library built with thread support (Open MPI's default)"));
  }
  HT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  HT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  HT_MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_.assign(name, std::size_t(len));
  set_error_identity(rank_, host_);
}

MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  const long abandoned = detail::abandoned_mpi_operations();
  if (abandoned > 0) {
    fmt::print(stderr,
               "hypertrain: rank {} on {}: not calling MPI_Finalize, because {} communication operation(s) of an "
               "aborted communicator are still in flight and would block it forever\n",
               rank_, host_, abandoned);
    std::fflush(stderr);
    return;
  }
  MPI_Finalize();
}

}  // namespace ht::comm
