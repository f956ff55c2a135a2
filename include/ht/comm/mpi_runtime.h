// ht::comm::MpiRuntime: the process's hold on MPI. Construct one at the top of
// main(), before any MPI communicator, and keep it alive until they are gone.
//
// It initialises MPI with MPI_THREAD_MULTIPLE (each communicator runs MPI on
// its own thread) unless MPI is already initialised, in which case it checks
// that the thread level provided is MPI_THREAD_MULTIPLE. It finalises MPI
// only if it initialised it. It names this rank and host in every later
// ht::Error (set_error_identity).
#pragma once

#include <string>

namespace ht::comm {

class MpiRuntime {
 public:
  /// `argc`/`argv` may be null. Throws ht::Error(kConfig) if MPI cannot
  /// provide MPI_THREAD_MULTIPLE or has already been finalised, CommError if
  /// initialisation fails.
  explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  /// Finalises MPI if this object initialised it. If an aborted communicator
  /// left operations in flight (MPI_Finalize would wait for them forever),
  /// it does not finalise and says so on stderr; the launcher then sees the
  /// process end without MPI_Finalize, as after a crash. Never throws.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  /// This process's host name (MPI_Get_processor_name).
  const std::string& host() const { return host_; }
  /// Whether this object initialised MPI (and will finalise it).
  bool owns_mpi() const { return owns_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  std::string host_;
  bool owns_ = false;
};

/// Whether MPI is initialised and not yet finalised in this process.
bool mpi_is_initialized();

}  // namespace ht::comm
