// Private: ring all-reduce, reduce-scatter and all-gather over
// point-to-point messages, the path for large payloads.
//
// Open MPI's nonblocking MPI_Iallreduce (libnbc) picks a binomial tree for
// fewer than 4 ranks or for in-place calls, which moves the whole vector
// through rank 0 twice: measured 140 ms for 64 MiB at 2 ranks against 70-85
// ms for the blocking MPI_Allreduce, and MPI_Ireduce_scatter_block is as
// slow. The ring (as in NCCL and gloo) moves 2(p-1)/p of the vector per rank
// in 2(p-1) steps of one chunk to the right neighbour and one from the left;
// measured 51-53 ms for the same 64 MiB (2 ranks) and 107 ms against 145 ms
// for the blocking call at 4 ranks. The all-gather ring took 60-68 us for
// 1 MiB out of place at 2 ranks where MPI_Iallgather took 90 (blocking
// MPI_Allgather 51-56). Below kRingMinBytes the MPI collective's fewer,
// smaller messages win.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "comm/mpi_handles.h"
#include "ht/comm/communicator.h"
#include "ht/core/tensor.h"

namespace ht::comm::detail {

inline constexpr std::size_t kRingMinBytes = std::size_t(256) << 10;
/// Whether an operation moving `bytes` of `elements` elements in all (the
/// whole vector of an all-reduce; all `size` blocks of a reduce-scatter or
/// all-gather) goes round the ring.
inline bool takes_ring(std::size_t bytes, std::int64_t elements, int size) {
  return size > 1 && bytes >= kRingMinBytes && elements >= size;
}
/// The tag of ring messages on the data communicator (user send/recv use another).
inline constexpr int kRingTag = 0x52;

/// One ring reduction over 4-byte elements (f32 or i32; f16/bf16 reach it
/// widened to f32). Each advance() completes the step whose messages have
/// arrived (reducing the received chunk) and issues the next.
///
/// all-reduce: `src` holds n elements (may equal `out`); `out` (n) gets the
///   reduction. Chunk k of the vector is elements [off(k), off(k+1)) with the
///   remainder spread over the first chunks. Step k < p-1 (reduce-scatter
///   phase): send chunk (r-k-1) mod p to the right, receive chunk (r-k-2)
///   mod p from the left and reduce it with this rank's own; after p-1 steps
///   rank r holds chunk r reduced over all ranks. Step p-1+j (all-gather
///   phase): send chunk (r-j) mod p, receive chunk (r-j-1) mod p in place.
///   Worked example, p = 2, rank 0: step 0 sends chunk 1, receives rank 1's
///   chunk 0 and adds its own; step 1 sends chunk 0, receives chunk 1.
/// reduce-scatter: `src` holds p blocks of n; `out` (n, may be block r of
///   `src`) gets block r reduced. Only the first phase runs, with partial
///   sums kept in a one-block scratch and the last step writing to `out`.
///
/// avg is reduced as a sum; the caller divides.
class RingReduction {
 public:
  enum class Kind { kAllReduce, kReduceScatter };
  RingReduction(Kind kind, const void* src, void* out, std::int64_t n, DType dtype, ReduceOp op, int rank, int size);

  /// Completes the previous step, if any, and issues the next one into
  /// `reqs`; false once every step has completed.
  bool advance(MPI_Comm comm, RequestSet& reqs);

 private:
  std::int64_t offset(int chunk) const;
  std::int64_t length(int chunk) const;
  int mod(int k) const { return ((k % size_) + size_) % size_; }
  char* at(const void* base, std::int64_t elements) const {
    return static_cast<char*>(const_cast<void*>(base)) + std::size_t(elements) * 4;
  }

  Kind kind_;
  const void* src_;
  void* out_;
  std::int64_t n_;
  DType dtype_;
  ReduceOp op_;
  int rank_, size_;
  int steps_;
  int step_ = 0;  // the next step to issue
  Tensor recv_, partial_;
};

/// One ring all-gather: `out` holds p blocks of `n` elements; `own` is this
/// rank's block (block `rank` of `out`, or another buffer that the caller
/// copies into it while the first step is in flight). Step j (of p-1) sends
/// block (r-j) mod p to the right — step 0 from `own` — and receives block
/// (r-j-1) mod p from the left.
class RingGather {
 public:
  RingGather(const void* own, void* out, std::int64_t n, DType dtype, int rank, int size)
      : own_(own), out_(static_cast<char*>(out)), n_(n), dtype_(dtype), rank_(rank), size_(size) {}

  /// Issues the next step into `reqs` (the previous one has completed);
  /// false once every step has completed.
  bool advance(MPI_Comm comm, RequestSet& reqs);

 private:
  char* block(int k) const {
    return out_ + std::size_t(((k % size_) + size_) % size_) * std::size_t(n_) * dtype_size(dtype_);
  }

  const void* own_;
  char* out_;
  std::int64_t n_;
  DType dtype_;
  int rank_, size_;
  int step_ = 0;  // the next step to issue
};

}  // namespace ht::comm::detail
