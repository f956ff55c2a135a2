// RingReduction: the steps of a ring all-reduce or reduce-scatter.
#include "comm/mpi_ring.h"

#include <algorithm>

#include "core/mpi_check.h"

namespace ht::comm::detail {
namespace {

template <typename T>
void combine(T* dst, const T* mine, const T* received, std::int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = mine[i] + received[i];
      return;
    case ReduceOp::kMax:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = std::max(mine[i], received[i]);
      return;
    case ReduceOp::kMin:
      for (std::int64_t i = 0; i < n; ++i) dst[i] = std::min(mine[i], received[i]);
      return;
  }
}

void combine(DType t, void* dst, const void* mine, const void* received, std::int64_t n, ReduceOp op) {
  if (t == DType::kI32)
    combine(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(mine),
            static_cast<const std::int32_t*>(received), n, op);
  else
    combine(static_cast<float*>(dst), static_cast<const float*>(mine), static_cast<const float*>(received), n, op);
}

}  // namespace

RingReduction::RingReduction(Kind kind, const void* src, void* out, std::int64_t n, DType dtype, ReduceOp op,
                             int rank, int size)
    : kind_(kind), src_(src), out_(out), n_(n), dtype_(dtype), op_(op), rank_(rank), size_(size) {
  HT_CHECK(dtype == DType::kF32 || dtype == DType::kI32, ErrorKind::kInternal, "ring reduction of {}",
           dtype_name(dtype));
  steps_ = kind == Kind::kAllReduce ? 2 * (size - 1) : size - 1;
  std::int64_t largest = 0;
  for (int k = 0; k < size; ++k) largest = std::max(largest, length(k));
  recv_ = Tensor::empty({largest}, dtype, Device::cpu(), MemCategory::kCommunication);
  // Partial sums pass between steps only from 3 ranks on; at 2 the one step
  // reduces straight into `out`.
  if (kind == Kind::kReduceScatter && size > 2)
    partial_ = Tensor::empty({largest}, dtype, Device::cpu(), MemCategory::kCommunication);
}

std::int64_t RingReduction::offset(int chunk) const {
  if (kind_ == Kind::kReduceScatter) return std::int64_t(chunk) * n_;
  const std::int64_t base = n_ / size_, rem = n_ % size_;
  return chunk * base + std::min<std::int64_t>(chunk, rem);
}

std::int64_t RingReduction::length(int chunk) const {
  if (kind_ == Kind::kReduceScatter) return n_;
  const std::int64_t base = n_ / size_, rem = n_ % size_;
  return base + (chunk < rem ? 1 : 0);
}

bool RingReduction::advance(MPI_Comm comm, RequestSet& reqs) {
  const int right = mod(rank_ + 1), left = mod(rank_ - 1);
  // The step that just completed: reduce what arrived with this rank's own chunk.
  if (step_ > 0 && step_ - 1 < size_ - 1) {
    const int k = step_ - 1;
    const int chunk = mod(rank_ - k - 2);
    void* dst = kind_ == Kind::kAllReduce ? at(out_, offset(chunk))
                : k == size_ - 2          ? out_
                                          : partial_.data_ptr();
    combine(dtype_, dst, at(src_, offset(chunk)), recv_.data_ptr(), length(chunk), op_);
  }
  if (step_ == steps_) return false;
  reqs.clear();
  const MPI_Datatype type = wire_type(dtype_);
  const int k = step_++;
  if (k < size_ - 1) {
    const int send_chunk = mod(rank_ - k - 1), recv_chunk = mod(rank_ - k - 2);
    // The first step sends this rank's own data; later ones the partial result of the step before.
    const void* send = k == 0                          ? at(src_, offset(send_chunk))
                       : kind_ == Kind::kAllReduce ? at(out_, offset(send_chunk))
                                                   : partial_.data_ptr();
    HT_MPI_CHECK(MPI_Irecv(recv_.data_ptr(), int(length(recv_chunk)), type, left, kRingTag, comm, reqs.add()));
    HT_MPI_CHECK(MPI_Isend(send, int(length(send_chunk)), type, right, kRingTag, comm, reqs.add()));
  } else {
    const int j = k - (size_ - 1);
    const int send_chunk = mod(rank_ - j), recv_chunk = mod(rank_ - j - 1);
    HT_MPI_CHECK(MPI_Irecv(at(out_, offset(recv_chunk)), int(length(recv_chunk)), type, left, kRingTag, comm,
                           reqs.add()));
    HT_MPI_CHECK(MPI_Isend(at(out_, offset(send_chunk)), int(length(send_chunk)), type, right, kRingTag, comm,
                           reqs.add()));
  }
  return true;
}

bool RingGather::advance(MPI_Comm comm, RequestSet& reqs) {
  if (step_ == size_ - 1) return false;
  reqs.clear();
  const int j = step_++;
  const MPI_Datatype type = wire_type(dtype_);
  HT_MPI_CHECK(MPI_Irecv(block(rank_ - j - 1), int(n_), type, (rank_ + size_ - 1) % size_, kRingTag, comm,
                         reqs.add()));
  HT_MPI_CHECK(MPI_Isend(j == 0 ? own_ : block(rank_ - j), int(n_), type, (rank_ + 1) % size_, kRingTag, comm,
                         reqs.add()));
  return true;
}

}  // namespace ht::comm::detail
