// Private: move-only owners of MPI handles (communicators, request sets), the
// MPI datatypes of hypertrain's dtypes, and the count of operations that
// aborted communicators left in flight.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/core/dtype.h"

namespace ht::comm::detail {

/// Operations (requests) that aborted communicators abandoned in flight: MPI
/// forbids freeing an active collective request, and MPI_Finalize would wait
/// for them forever, so MpiRuntime does not finalise while this is non-zero.
void add_abandoned_mpi_operations(long n) noexcept;
long abandoned_mpi_operations() noexcept;

/// Owns one MPI communicator and frees it on destruction. release() gives the
/// handle up without freeing it: an aborted communicator with operations
/// still in flight must not be freed (erroneous in MPI), only leaked.
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm c) : c_(c) {}
  MpiComm(MpiComm&& o) noexcept : c_(o.c_) { o.c_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = o.c_;
      o.c_ = MPI_COMM_NULL;
    }
    return *this;
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  ~MpiComm() { reset(); }

  MPI_Comm get() const { return c_; }
  explicit operator bool() const { return c_ != MPI_COMM_NULL; }
  void reset() noexcept {
    if (c_ != MPI_COMM_NULL) MPI_Comm_free(&c_);
    c_ = MPI_COMM_NULL;
  }
  MPI_Comm release() noexcept {
    MPI_Comm c = c_;
    c_ = MPI_COMM_NULL;
    return c;
  }

 private:
  MPI_Comm c_ = MPI_COMM_NULL;
};

/// The requests of one operation, with their statuses once complete. A set
/// destroyed while a request is still active is leaked (and counted in
/// abandoned_mpi_operations), never freed: freeing an active collective
/// request is erroneous in MPI.
class RequestSet {
 public:
  RequestSet() = default;
  RequestSet(RequestSet&&) noexcept = default;
  RequestSet& operator=(RequestSet&&) noexcept = delete;
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;
  ~RequestSet();

  /// A slot for the next nonblocking call to fill: `MPI_Ixxx(..., set.add())`.
  MPI_Request* add();
  /// Forgets completed requests (before the next step of a multi-step operation).
  void clear();
  /// MPI_Cancel on every active request: only for point-to-point requests
  /// (cancelling a collective's is erroneous). They still need test() to complete.
  void cancel() noexcept;
  /// MPI_Testall: true once every request has completed. Throws CommError.
  bool test();
  bool empty() const { return requests_.empty(); }
  std::size_t size() const { return requests_.size(); }
  /// The status of request i (after test() returned true).
  const MPI_Status& status(std::size_t i) const { return statuses_.at(i); }
  /// Whether any request is still active, and how many are.
  bool active() const { return active_count() > 0; }
  long active_count() const;

 private:
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
};

/// The datatype that carries `t` on the wire: MPI_FLOAT, MPI_INT32_T, and
/// MPI_UINT16_T for f16 and bf16 (moved as bits; they are reduced in f32).
MPI_Datatype wire_type(DType t);
/// MPI_SUM (also for avg, divided afterwards), MPI_MAX, MPI_MIN.
MPI_Op mpi_op(ReduceOp op);

/// Creates a communicator with MPI_Comm_idup, polling until done or until
/// `deadline`; nullptr result and `false` on a missed deadline (the request is
/// then leaked). The new communicator returns errors instead of aborting.
bool idup_until(MPI_Comm parent, MPI_Comm* out, std::chrono::steady_clock::time_point deadline);

}  // namespace ht::comm::detail
