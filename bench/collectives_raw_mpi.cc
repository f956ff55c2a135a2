// ht-collectives-bench --compare-raw: raw MPI on our buffers (collectives_raw_mpi.h).
#include "collectives_raw_mpi.h"

#include <algorithm>

#include "ht/core/half.h"

namespace ht::bench::collectives {
namespace {

template <class H>
H from_float(float f);
template <>
f16 from_float<f16>(float f) { return to_f16(f); }
template <>
bf16 from_float<bf16>(float f) { return to_bf16(f); }

template <class H, int kKind>  // 0 sum, 1 max, 2 min
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = to_float(a[i]), y = to_float(b[i]);
    b[i] = from_float<H>(kKind == 0 ? x + y : kKind == 1 ? std::max(x, y) : std::min(x, y));
  }
}

}  // namespace

RawMpi::RawMpi(DType t, ReduceOp r) {
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
  avg_ = r == ReduceOp::kAvg;
  const int kind = r == ReduceOp::kMax ? 1 : r == ReduceOp::kMin ? 2 : 0;
  switch (t) {
    case DType::kF32: type_ = MPI_FLOAT; break;
    case DType::kI32: type_ = MPI_INT32_T; break;
    case DType::kF16:
    case DType::kBF16: type_ = MPI_UINT16_T; break;
  }
  if (t == DType::kF16 || t == DType::kBF16) {
    MPI_User_function* fns[2][3] = {{half_op<f16, 0>, half_op<f16, 1>, half_op<f16, 2>},
                                    {half_op<bf16, 0>, half_op<bf16, 1>, half_op<bf16, 2>}};
    MPI_Op_create(fns[t == DType::kBF16][kind], 1, &op_);
    user_op_ = true;
  } else {
    op_ = kind == 1 ? MPI_MAX : kind == 2 ? MPI_MIN : MPI_SUM;
  }
}

RawMpi::~RawMpi() {
  if (user_op_) MPI_Op_free(&op_);
  MPI_Comm_free(&comm_);
}

void RawMpi::divide(const Tensor& t) const {
  Tensor h = t;
  for (std::int64_t i = 0; i < h.numel(); ++i) store(h, i, load(h, i) / size_);
}

void RawMpi::run(Op o, const Tensor& in, Tensor& out, bool in_place, bool nonblocking, int root,
                 std::int64_t block) {
  void* ip = in.defined() ? in.data_ptr() : nullptr;
  void* outp = out.defined() ? out.data_ptr() : nullptr;
  void* send = in_place ? MPI_IN_PLACE : ip;
  const int n_in = int(in.numel()), b = int(block);
  MPI_Request req = MPI_REQUEST_NULL;
  switch (o) {
    case Op::kAllReduce:
      if (nonblocking) MPI_Iallreduce(send, outp, n_in, type_, op_, comm_, &req);
      else MPI_Allreduce(send, outp, n_in, type_, op_, comm_);
      break;
    case Op::kReduceScatter: {
      // In place: MPI's layout (the whole buffer in, block 0 of it out).
      void* recv = in_place ? ip : outp;
      if (nonblocking) MPI_Ireduce_scatter_block(send, recv, b, type_, op_, comm_, &req);
      else MPI_Reduce_scatter_block(send, recv, b, type_, op_, comm_);
      break;
    }
    case Op::kAllGather: {
      const int send_count = in_place ? 0 : b;
      MPI_Datatype send_type = in_place ? MPI_DATATYPE_NULL : type_;
      if (nonblocking) MPI_Iallgather(send, send_count, send_type, outp, b, type_, comm_, &req);
      else MPI_Allgather(send, send_count, send_type, outp, b, type_, comm_);
      break;
    }
    case Op::kBroadcast: MPI_Bcast(outp, int(out.numel()), type_, root, comm_); break;
    case Op::kReduce:
      MPI_Reduce(in_place && rank_ == root ? MPI_IN_PLACE : ip, outp, n_in, type_, op_, root, comm_);
      break;
    case Op::kAllToAll:
      if (in_place) MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, outp, b, type_, comm_);
      else MPI_Alltoall(ip, b, type_, outp, b, type_, comm_);
      break;
    case Op::kAllToAllV: {  // the uneven blocks of uneven_send_counts (block: their unit)
      std::vector<int> counts, displs;
      for (std::int64_t c : uneven_send_counts(block, rank_, size_)) {
        displs.push_back(counts.empty() ? 0 : displs.back() + counts.back());
        counts.push_back(int(c));
      }
      MPI_Alltoallv(ip, counts.data(), displs.data(), type_, outp, counts.data(), displs.data(), type_, comm_);
      break;
    }
    case Op::kSendRecv:
      MPI_Sendrecv(ip, n_in, type_, (rank_ + 1) % size_, 7, outp, int(out.numel()), type_,
                   (rank_ - 1 + size_) % size_, 7, comm_, MPI_STATUS_IGNORE);
      break;
  }
  if (nonblocking) MPI_Wait(&req, MPI_STATUS_IGNORE);
  if (avg_ && has_redop(o)) {
    if (o == Op::kReduceScatter) divide(in_place ? in.slice(0, block) : out);
    else if (o != Op::kReduce || rank_ == root) divide(in_place ? in : out);
  }
}

bool raw_has_nonblocking(Op op) {
  return op == Op::kAllReduce || op == Op::kReduceScatter || op == Op::kAllGather;
}

}  // namespace ht::bench::collectives
