// ht-collectives-bench --compare-raw: the same operations through raw MPI
// calls on the same buffers (MPI_Allreduce, MPI_Reduce_scatter_block,
// MPI_Allgather, MPI_Bcast, MPI_Reduce, MPI_Alltoall, MPI_Sendrecv) and, for
// all_reduce, reduce_scatter and all_gather, their nonblocking forms followed
// by MPI_Wait. f16/bf16 reductions go through user MPI_Ops that compute in
// f32 (MPI has no such types), avg as a sum then a local division.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "collectives_common.h"

namespace ht::bench::collectives {

/// Raw MPI on a duplicate of MPI_COMM_WORLD, for one dtype and reduction.
class RawMpi {
 public:
  RawMpi(DType t, ReduceOp r);
  ~RawMpi();
  RawMpi(const RawMpi&) = delete;
  RawMpi& operator=(const RawMpi&) = delete;

  /// One raw call on the same buffers as ours; `nonblocking`: the I-form + MPI_Wait.
  void run(Op o, const Tensor& in, Tensor& out, bool in_place, bool nonblocking, int root, std::int64_t block);

 private:
  /// avg: divides the summed `t` by the world size, on the host.
  void divide(const Tensor& t) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Datatype type_ = MPI_FLOAT;
  MPI_Op op_ = MPI_SUM;
  bool user_op_ = false;
  bool avg_ = false;
  int size_ = 1, rank_ = 0;
};

/// Whether raw MPI has a nonblocking form timed for `op`.
bool raw_has_nonblocking(Op op);

}  // namespace ht::bench::collectives
