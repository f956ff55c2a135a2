// The MPI bodies of MpiCommunicator's operations. f16 and bf16 reductions go
// through an f32 scratch buffer (MPI has no 16-bit float types, and f32
// accumulation is what makes f16 sums correct): convert in, reduce in f32,
// convert back with round-to-nearest-even. avg is a sum divided by the group
// size after the reduction. Data movement without arithmetic (gather,
// broadcast, all_to_all, send/recv) moves f16/bf16 as 16-bit words.
#include <array>
#include <fmt/format.h>

#include <climits>
#include <cstring>

#include "comm/mpi_op.h"
#include "comm/mpi_ring.h"
#include "core/mpi_check.h"

namespace ht::comm::detail {
namespace {

Tensor f32_scratch(std::int64_t n) { return Tensor::empty({n}, DType::kF32, Device::cpu(), MemCategory::kCommunication); }

/// f32 copy of a 16-bit float tensor.
Tensor widen(const Tensor& t) {
  Tensor w = f32_scratch(t.numel());
  float* dst = w.data<float>();
  const std::int64_t n = t.numel();
  if (t.dtype() == DType::kF16) {
    const f16* src = t.data<f16>();
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  } else {
    const bf16* src = t.data<bf16>();
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
  }
  return w;
}

/// Writes the first out.numel() values of f32 `w` into 16-bit float `out`, rounding to nearest even.
void narrow_into(const Tensor& w, const Tensor& out) {
  const float* src = w.data<float>();
  const std::int64_t n = out.numel();
  if (out.dtype() == DType::kF16) {
    f16* dst = out.data<f16>();
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_f16(src[i]);
  } else {
    bf16* dst = out.data<bf16>();
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
  }
}

void divide(float* p, std::int64_t n, int size) {
  const float d = float(size);
  for (std::int64_t i = 0; i < n; ++i) p[i] /= d;
}

bool is_half(DType t) { return t == DType::kF16 || t == DType::kBF16; }
int icount(std::int64_t n) { return int(n); }  // validated <= INT_MAX by the communicator

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kAllToAllV: return "all_to_all_v";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSplit: return "split";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kSendRecv: return "send_recv";
  }
  return "unknown";
}

std::string signature_str(const OpSignature& s) {
  const OpKind k = OpKind(s.kind);
  const bool known = s.kind >= int(OpKind::kAllReduce) && s.kind <= int(OpKind::kSendRecv);
  if (!known) return fmt::format("an unknown operation (code {})", s.kind);
  if (k == OpKind::kBarrier) return "barrier()";
  if (k == OpKind::kSplit) return "split()";
  std::string args = fmt::format("{} x {}", s.count, dtype_name(DType(s.dtype)));
  if (s.redop >= 0) args += ", " + reduce_op_name(ReduceOp(s.redop));
  if (s.root >= 0) args += fmt::format(", root {}", s.root);
  return fmt::format("{}({})", op_kind_name(k), args);
}

bool WorkState::settle(std::exception_ptr e, const std::function<void()>& before_wake) {
  {
    std::lock_guard lock(mu);
    if (status.load() != kPending) return false;
    if (before_wake) before_wake();
    error = std::move(e);
    status.store(error ? kFailed : kDone);
  }
  cv.notify_all();
  return true;
}

std::string WorkState::describe() const {
  const OpKind k = OpKind(sig.kind);
  std::string what = fmt::format("{} #{}", op_kind_name(k), sig.seq);
  if (k == OpKind::kSend) what += fmt::format(" to rank {}", peer);
  if (k == OpKind::kRecv) what += fmt::format(" from rank {}", peer);
  if (k == OpKind::kSendRecv) what += fmt::format(" (to rank {}, from rank {})", peer, peer2);
  what += fmt::format(" on group '{}'", group);
  if (k == OpKind::kBarrier || k == OpKind::kSplit) return what;
  what += fmt::format(" ({} x {}", sig.count, dtype_name(DType(sig.dtype)));
  if (sig.redop >= 0) what += ", " + reduce_op_name(ReduceOp(sig.redop));
  if (sig.root >= 0) what += fmt::format(", root {}", sig.root);
  return what + ")";
}

// Large payloads take the ring (comm/mpi_ring.h); small ones MPI_Iallreduce.
OpBody all_reduce_body(const Tensor& in, const Tensor& out, ReduceOp op, int rank, int size) {
  OpBody b;
  b.payload_bytes = in.nbytes();
  const std::int64_t n = in.numel();
  const bool half = is_half(in.dtype());
  const bool ring = takes_ring(std::size_t(n) * 4, n, size);
  auto scratch = std::make_shared<Tensor>();
  auto steps = std::make_shared<std::unique_ptr<RingReduction>>();
  b.start = [in, out, n, op, rank, size, half, ring, scratch, steps](MPI_Comm comm, RequestSet& reqs) {
    const void* src = in.data_ptr();
    void* dst = out.data_ptr();
    DType type = in.dtype();
    if (half) {
      *scratch = widen(in);
      src = dst = scratch->data_ptr();
      type = DType::kF32;
    }
    if (ring) {
      *steps = std::make_unique<RingReduction>(RingReduction::Kind::kAllReduce, src, dst, n, type, op, rank, size);
      (*steps)->advance(comm, reqs);
      return;
    }
    HT_MPI_CHECK(MPI_Iallreduce(src == dst ? MPI_IN_PLACE : src, dst, icount(n), half ? MPI_FLOAT : wire_type(type),
                                mpi_op(op), comm, reqs.add()));
  };
  if (ring) b.next = [steps](MPI_Comm comm, RequestSet& reqs) { return (*steps)->advance(comm, reqs); };
  b.point_to_point = ring;
  b.finish = [out, n, op, size, half, scratch](const RequestSet&) {
    Tensor result = half ? *scratch : out;
    if (op == ReduceOp::kAvg) divide(result.data<float>(), n, size);
    if (half) narrow_into(result, out);
  };
  return b;
}

// MPI path: the result goes to a scratch block and is copied out afterwards
// when `out` is the caller's own block of `in` (NCCL's in-place layout),
// which MPI's MPI_IN_PLACE for reduce_scatter_block does not match (it
// writes block 0). The ring writes block rank() directly.
OpBody reduce_scatter_body(const Tensor& in, const Tensor& out, ReduceOp op, int rank, int size) {
  OpBody b;
  b.payload_bytes = in.nbytes();
  const std::int64_t n = out.numel();
  const bool half = is_half(in.dtype());
  const bool ring = takes_ring(std::size_t(n) * size * 4, n * size, size);
  const bool aliased = !half && !ring && out.nbytes() > 0 && same_storage(in, out);
  auto wide_in = std::make_shared<Tensor>();
  auto result = std::make_shared<Tensor>();
  auto steps = std::make_shared<std::unique_ptr<RingReduction>>();
  b.start = [in, out, op, n, rank, size, half, ring, aliased, wide_in, result, steps](MPI_Comm comm,
                                                                                     RequestSet& reqs) {
    const void* send = in.data_ptr();
    DType type = in.dtype();
    void* recv = out.data_ptr();
    if (half) {
      *wide_in = widen(in);
      *result = f32_scratch(n);
      send = wide_in->data_ptr();
      recv = result->data_ptr();
      type = DType::kF32;
    } else if (aliased) {
      *result = Tensor::empty({n}, in.dtype(), Device::cpu(), MemCategory::kCommunication);
      recv = result->data_ptr();
    }
    if (ring) {
      *steps =
          std::make_unique<RingReduction>(RingReduction::Kind::kReduceScatter, send, recv, n, type, op, rank, size);
      (*steps)->advance(comm, reqs);
      return;
    }
    HT_MPI_CHECK(
        MPI_Ireduce_scatter_block(send, recv, icount(n), wire_type(type), mpi_op(op), comm, reqs.add()));
  };
  if (ring) b.next = [steps](MPI_Comm comm, RequestSet& reqs) { return (*steps)->advance(comm, reqs); };
  b.point_to_point = ring;
  b.finish = [out, op, n, size, half, aliased, result](const RequestSet&) {
    if (half) {
      if (op == ReduceOp::kAvg) divide(result->data<float>(), n, size);
      narrow_into(*result, out);
      return;
    }
    if (aliased) std::memcpy(out.data_ptr(), result->data_ptr(), out.nbytes());
    if (op == ReduceOp::kAvg) divide(out.data<float>(), n, size);
  };
  return b;
}

// Large payloads go round the ring (comm/mpi_ring.h), after this rank's own
// block is copied into place; small ones take MPI_Iallgather.
OpBody all_gather_body(const Tensor& in, const Tensor& out, int rank, int size) {
  OpBody b;
  b.payload_bytes = out.nbytes();
  const std::int64_t n = in.numel();
  const bool ring = takes_ring(out.nbytes(), out.numel(), size);
  auto steps = std::make_shared<std::unique_ptr<RingGather>>();
  b.start = [in, out, n, rank, size, ring, steps](MPI_Comm comm, RequestSet& reqs) {
    auto* own_block = static_cast<char*>(out.data_ptr()) + std::size_t(rank) * in.nbytes();
    const bool in_place = in.nbytes() > 0 && in.data_ptr() == own_block;
    if (ring) {
      *steps = std::make_unique<RingGather>(in.data_ptr(), out.data_ptr(), n, in.dtype(), rank, size);
      (*steps)->advance(comm, reqs);
      // The peer reads `in` itself (a single copy between processes of one
      // host), so the copy into place overlaps the first exchange.
      if (!in_place) std::memcpy(own_block, in.data_ptr(), in.nbytes());
      return;
    }
    const MPI_Datatype type = wire_type(in.dtype());
    HT_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data_ptr(), icount(n), type, out.data_ptr(), icount(n),
                                type, comm, reqs.add()));
  };
  if (ring) b.next = [steps](MPI_Comm comm, RequestSet& reqs) { return (*steps)->advance(comm, reqs); };
  b.point_to_point = ring;
  return b;
}

OpBody broadcast_body(const Tensor& t, int root) {
  OpBody b;
  b.payload_bytes = t.nbytes();
  b.start = [t, root](MPI_Comm comm, RequestSet& reqs) {
    HT_MPI_CHECK(MPI_Ibcast(t.data_ptr(), icount(t.numel()), wire_type(t.dtype()), root, comm, reqs.add()));
  };
  return b;
}

OpBody reduce_body(const Tensor& in, const Tensor& out, ReduceOp op, int root, int rank, int size) {
  OpBody b;
  b.payload_bytes = in.nbytes();
  const std::int64_t n = in.numel();
  const bool is_root = rank == root;
  if (!is_half(in.dtype())) {
    b.start = [in, out, op, n, root, is_root](MPI_Comm comm, RequestSet& reqs) {
      const void* send = is_root && in.data_ptr() == out.data_ptr() ? MPI_IN_PLACE : in.data_ptr();
      void* recv = is_root ? out.data_ptr() : nullptr;
      HT_MPI_CHECK(MPI_Ireduce(send, recv, icount(n), wire_type(in.dtype()), mpi_op(op), root, comm, reqs.add()));
    };
    if (is_root && op == ReduceOp::kAvg)
      b.finish = [out, n, size](const RequestSet&) { divide(out.data<float>(), n, size); };
    return b;
  }
  auto scratch = std::make_shared<Tensor>();
  b.start = [in, n, op, root, is_root, scratch](MPI_Comm comm, RequestSet& reqs) {
    *scratch = widen(in);
    const void* send = is_root ? MPI_IN_PLACE : scratch->data_ptr();
    void* recv = is_root ? scratch->data_ptr() : nullptr;
    HT_MPI_CHECK(MPI_Ireduce(send, recv, icount(n), MPI_FLOAT, mpi_op(op), root, comm, reqs.add()));
  };
  if (is_root)
    b.finish = [out, n, op, size, scratch](const RequestSet&) {
      if (op == ReduceOp::kAvg) divide(scratch->data<float>(), n, size);
      narrow_into(*scratch, out);
    };
  return b;
}

// In place (in and out the same tensor) the input is copied first: Open MPI's
// nonblocking all-to-all does not take MPI_IN_PLACE everywhere.
OpBody all_to_all_body(const Tensor& in, const Tensor& out, int size) {
  OpBody b;
  b.payload_bytes = in.nbytes();
  const std::int64_t block = size > 0 ? in.numel() / size : 0;
  const bool aliased = in.nbytes() > 0 && same_storage(in, out);
  auto copy = std::make_shared<Tensor>();
  b.start = [in, out, block, aliased, copy](MPI_Comm comm, RequestSet& reqs) {
    const void* send = in.data_ptr();
    if (aliased) {
      *copy = Tensor::empty(in.shape(), in.dtype(), Device::cpu(), MemCategory::kCommunication);
      copy->copy_from(in);
      send = copy->data_ptr();
    }
    const MPI_Datatype type = wire_type(in.dtype());
    HT_MPI_CHECK(MPI_Ialltoall(send, icount(block), type, out.data_ptr(), icount(block), type, comm, reqs.add()));
  };
  return b;
}

// MPI's counts and displacements are ints; they fit, as the tensors' element
// counts do (checked by the communicator) and the counts add up to them.
OpBody all_to_all_v_body(const Tensor& in, const std::vector<std::int64_t>& send_counts, const Tensor& out,
                         const std::vector<std::int64_t>& recv_counts) {
  OpBody b;
  b.payload_bytes = in.nbytes();
  auto layout = std::make_shared<std::array<std::vector<int>, 4>>();  // send counts, send displs, recv counts, recv displs
  for (int side = 0; side < 2; ++side) {
    const std::vector<std::int64_t>& counts = side == 0 ? send_counts : recv_counts;
    std::int64_t at = 0;
    for (std::int64_t c : counts) {
      (*layout)[std::size_t(2 * side)].push_back(icount(c));
      (*layout)[std::size_t(2 * side + 1)].push_back(icount(at));
      at += c;
    }
  }
  b.start = [in, out, layout](MPI_Comm comm, RequestSet& reqs) {
    const MPI_Datatype type = wire_type(in.dtype());
    const auto& l = *layout;
    HT_MPI_CHECK(MPI_Ialltoallv(in.data_ptr(), l[0].data(), l[1].data(), type, out.data_ptr(), l[2].data(),
                                l[3].data(), type, comm, reqs.add()));
  };
  return b;
}

OpBody send_body(const Tensor& t, int peer, int tag) {
  OpBody b;
  b.point_to_point = true;
  b.payload_bytes = t.nbytes();
  b.start = [t, peer, tag](MPI_Comm comm, RequestSet& reqs) {
    HT_MPI_CHECK(MPI_Isend(t.data_ptr(), icount(t.numel()), wire_type(t.dtype()), peer, tag, comm, reqs.add()));
  };
  return b;
}

namespace {

// A receive into `t` from `peer`: it waits for the message with a matched
// probe and takes it into `t` when the sizes agree. When they do not, it
// still takes the message (into a buffer of its size, so that the sender's
// send completes and nothing writes past `t`) and then fails naming both.
struct MatchedReceive {
  Tensor t;
  int peer = 0, tag = 0;
  Tensor spill;           // a message of another size lands here
  std::int64_t got_bytes = -1;

  bool match(MPI_Comm comm, RequestSet& reqs) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    HT_MPI_CHECK(MPI_Improbe(peer, tag, comm, &found, &message, &status));
    if (!found) return false;
    int bytes = 0;
    HT_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &bytes));
    got_bytes = bytes;
    if (std::int64_t(bytes) == std::int64_t(t.nbytes())) {
      HT_MPI_CHECK(MPI_Imrecv(t.data_ptr(), icount(t.numel()), wire_type(t.dtype()), &message, reqs.add()));
    } else {
      spill = Tensor::empty({bytes / 4 + 1}, DType::kI32, Device::cpu(), MemCategory::kCommunication);
      HT_MPI_CHECK(MPI_Imrecv(spill.data_ptr(), bytes, MPI_BYTE, &message, reqs.add()));
    }
    return true;
  }
  void check() const {
    if (got_bytes == std::int64_t(t.nbytes())) return;
    const std::int64_t size = std::int64_t(dtype_size(t.dtype()));
    throw Error(ErrorKind::kShapeMismatch,
                fmt::format("recv from rank {} got {} elements of {} but the receiving tensor holds {}{}: sender and "
                            "receiver must agree on the count",
                            peer, got_bytes / size, dtype_name(t.dtype()), t.numel(),
                            got_bytes % size ? fmt::format(" ({} bytes, not a whole number of elements)", got_bytes)
                                             : std::string()));
  }
};

}  // namespace

OpBody recv_body(const Tensor& t, int peer, int tag) {
  OpBody b;
  b.point_to_point = true;
  b.payload_bytes = t.nbytes();
  auto receive = std::make_shared<MatchedReceive>(MatchedReceive{.t = t, .peer = peer, .tag = tag});
  b.match = [receive](MPI_Comm comm, RequestSet& reqs) { return receive->match(comm, reqs); };
  b.finish = [receive](const RequestSet&) { receive->check(); };
  return b;
}

OpBody send_recv_body(const Tensor& send, int dst, const Tensor& recv, int src, int tag) {
  OpBody b;
  b.point_to_point = true;
  b.payload_bytes = send.nbytes() + recv.nbytes();
  const bool aliased = send.nbytes() > 0 && recv.nbytes() > 0 && same_storage(send, recv);
  auto copy = std::make_shared<Tensor>();
  b.start = [send, dst, tag, aliased, copy](MPI_Comm comm, RequestSet& reqs) {
    const void* out = send.data_ptr();
    if (aliased) {  // the receive may land before the send has read it
      *copy = send.clone();
      out = copy->data_ptr();
    }
    HT_MPI_CHECK(MPI_Isend(out, icount(send.numel()), wire_type(send.dtype()), dst, tag, comm, reqs.add()));
  };
  auto receive = std::make_shared<MatchedReceive>(MatchedReceive{.t = recv, .peer = src, .tag = tag});
  b.match = [receive](MPI_Comm comm, RequestSet& reqs) { return receive->match(comm, reqs); };
  b.finish = [receive](const RequestSet&) { receive->check(); };
  return b;
}

OpBody barrier_body() {
  OpBody b;
  b.start = [](MPI_Comm comm, RequestSet& reqs) { HT_MPI_CHECK(MPI_Ibarrier(comm, reqs.add())); };
  return b;
}

}  // namespace ht::comm::detail
