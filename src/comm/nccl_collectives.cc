// NcclCommunicator's operations: argument validation, then the NCCL calls
// enqueued on the communicator's stream (see nccl_state.h for the machinery).
#include <cstdint>
#include <vector>

#include "comm/nccl_state.h"
#include "ht/ops/cast.h"

namespace ht::comm {

using detail::OpInfo;
using detail::PendingOp;
using detail::to_nccl;

namespace {

using Impl = NcclCommunicator::Impl;

// --- Validation -----------------------------------------------------------------

void check_tensor(const Impl& c, const char* op, const char* what, const Tensor& t) {
  HT_CHECK(t.defined(), ErrorKind::kInvalidArgument, "{} on NCCL group '{}': '{}' is undefined", op, c.name, what);
  HT_CHECK(t.device() == Device::cuda(c.device), ErrorKind::kDeviceMismatch,
           "{} on NCCL group '{}': '{}' is on {} but the communicator works on cuda:{}; move it there with "
           ".to(Device::cuda({})), or use the MPI communicator for host tensors",
           op, c.name, what, t.device().str(), c.device, c.device);
}

void check_same_dtype(const Impl& c, const char* op, const Tensor& in, const Tensor& out) {
  HT_CHECK(in.dtype() == out.dtype(), ErrorKind::kDTypeMismatch,
           "{} on NCCL group '{}': 'in' is {} but 'out' is {}; convert with ops::cast first", op, c.name,
           dtype_name(in.dtype()), dtype_name(out.dtype()));
}

void check_count(const Impl& c, const char* op, const char* what, const Tensor& t, std::int64_t expected,
                 const char* rule) {
  HT_CHECK(t.numel() == expected, ErrorKind::kShapeMismatch,
           "{} on NCCL group '{}' (size {}): '{}' must hold {} elements ({}), got {} (shape {})", op, c.name, c.size,
           what, expected, rule, t.numel(), shape_str(t.shape()));
}

void check_rank(const Impl& c, const char* op, const char* what, int r) {
  HT_CHECK(r >= 0 && r < c.size, ErrorKind::kOutOfRange,
           "{} on NCCL group '{}': {} {} is not a rank of the group (size {})", op, c.name, what, r, c.size);
}

/// Throws unless a and b are disjoint (NCCL's results are undefined for
/// buffers that overlap other than in its in-place conventions).
void check_disjoint(const Impl& c, const char* op, const Tensor& a, const Tensor& b, const char* in_place_rule) {
  HT_CHECK(a.nbytes() == 0 || b.nbytes() == 0 || !same_storage(a, b), ErrorKind::kInvalidArgument,
           "{} on NCCL group '{}': 'in' and 'out' overlap; pass disjoint tensors, or {}", op, c.name, in_place_rule);
}

const char* bytes_at(const Tensor& t, std::int64_t elements) {
  return static_cast<const char*>(t.data_ptr()) + elements * std::int64_t(dtype_size(t.dtype()));
}

char* bytes_at(Tensor& t, std::int64_t elements) {
  return static_cast<char*>(t.data_ptr()) + elements * std::int64_t(dtype_size(t.dtype()));
}

/// The MPI backend's rule, kept so that both backends accept the same calls.
void check_reduce_op(const Impl& c, const char* op, DType dtype, ReduceOp reduce_op) {
  HT_CHECK(!(dtype == DType::kI32 && reduce_op == ReduceOp::kAvg), ErrorKind::kNotSupported,
           "{} on NCCL group '{}': avg of i32 is not supported (an integer mean would have to round): reduce with "
           "sum and divide, or convert to f32",
           op, c.name);
}

/// f16 and bf16 sums and averages are reduced in f32 (the contract of every
/// backend); max and min are exact in the element type.
bool reduce_in_f32(DType dtype, ReduceOp op) {
  return (dtype == DType::kF16 || dtype == DType::kBF16) && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
}

/// A device buffer for the duration of one operation. The guard restores the
/// caller's current device, which the allocator leaves set to ours.
Tensor scratch_buffer(const Impl& c, std::int64_t n, DType dtype = DType::kF32) {
  const ht::cuda::DeviceGuard guard(Device::cuda(c.device));
  return Tensor::empty({n}, dtype, Device::cuda(c.device), MemCategory::kCommunication);
}

/// ncclGroupStart, `calls()` (ncclSend/ncclRecv, returning the first error),
/// ncclGroupEnd; the group is always closed, and the first error returned.
template <typename Calls>
ncclResult_t in_group(Calls&& calls) {
  const ncclResult_t start = ncclGroupStart();
  if (start != ncclSuccess) return start;
  const ncclResult_t inner = calls();
  const ncclResult_t end = ncclGroupEnd();
  return inner != ncclSuccess ? inner : end;
}

OpInfo info_of(const char* op, std::int64_t count, DType dtype, int peer = -1, const char* peer_name = "root",
               int reduce_op = -1, bool collective = true) {
  OpInfo info;
  info.op = op;
  info.count = count;
  info.dtype = dtype;
  info.peer = peer;
  info.peer_name = peer_name;
  info.reduce_op = reduce_op;
  info.collective = collective;
  return info;
}

}  // namespace

// --- Collectives ----------------------------------------------------------------

WorkPtr NcclCommunicator::all_reduce(const Tensor& in, Tensor& out, ReduceOp op) {
  Impl& c = *impl_;
  const char* name = "all_reduce";
  check_tensor(c, name, "in", in);
  check_tensor(c, name, "out", out);
  check_same_dtype(c, name, in, out);
  const std::int64_t n = in.numel();
  check_count(c, name, "out", out, n, "the count of 'in'");
  check_reduce_op(c, name, in.dtype(), op);
  if (in.data_ptr() != out.data_ptr()) check_disjoint(c, name, in, out, "the same tensor for an in-place all_reduce");
  const bool widen = reduce_in_f32(in.dtype(), op) && n > 0;
  Tensor scratch = widen ? scratch_buffer(c, n) : Tensor();

  return c.enqueue(info_of(name, n, in.dtype(), -1, "root", int(op)), {in, out, scratch}, [&](const PendingOp& p) {
    if (n == 0) return;
    if (widen) {
      ops::cast(in, scratch);
      c.nccl(p, "ncclAllReduce", [&](ncclComm_t comm) {
        return ncclAllReduce(scratch.data_ptr(), scratch.data_ptr(), std::size_t(n), ncclFloat32, to_nccl(op), comm,
                             c.stream());
      });
      ops::cast(scratch, out);
    } else {
      c.nccl(p, "ncclAllReduce", [&](ncclComm_t comm) {
        return ncclAllReduce(in.data_ptr(), out.data_ptr(), std::size_t(n), to_nccl(in.dtype()), to_nccl(op), comm,
                             c.stream());
      });
    }
  });
}

WorkPtr NcclCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  Impl& c = *impl_;
  const char* name = "reduce_scatter";
  check_tensor(c, name, "in", in);
  check_tensor(c, name, "out", out);
  check_same_dtype(c, name, in, out);
  const std::int64_t n = out.numel();
  check_count(c, name, "in", in, std::int64_t(c.size) * n, "size() x the count of 'out'");
  check_reduce_op(c, name, in.dtype(), op);
  // In place, NCCL's way: out is block rank() of in.
  const bool in_place = out.data_ptr() == bytes_at(in, std::int64_t(c.rank) * n);
  if (!in_place) check_disjoint(c, name, in, out, "'out' as block rank() of 'in' for an in-place reduce_scatter");
  const bool widen = reduce_in_f32(in.dtype(), op) && n > 0;
  // One f32 buffer for the whole input; NCCL reduces in place into block rank().
  Tensor scratch = widen ? scratch_buffer(c, std::int64_t(c.size) * n) : Tensor();

  return c.enqueue(info_of(name, n, in.dtype(), -1, "root", int(op)), {in, out, scratch}, [&](const PendingOp& p) {
    if (n == 0) return;
    if (widen) {
      ops::cast(in, scratch);
      Tensor mine = scratch.slice(std::int64_t(c.rank) * n, std::int64_t(c.rank + 1) * n);
      c.nccl(p, "ncclReduceScatter", [&](ncclComm_t comm) {
        return ncclReduceScatter(scratch.data_ptr(), mine.data_ptr(), std::size_t(n), ncclFloat32, to_nccl(op), comm,
                                 c.stream());
      });
      ops::cast(mine, out);
    } else {
      c.nccl(p, "ncclReduceScatter", [&](ncclComm_t comm) {
        return ncclReduceScatter(in.data_ptr(), out.data_ptr(), std::size_t(n), to_nccl(in.dtype()), to_nccl(op), comm,
                                 c.stream());
      });
    }
  });
}

WorkPtr NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  Impl& c = *impl_;
  const char* name = "all_gather";
  check_tensor(c, name, "in", in);
  check_tensor(c, name, "out", out);
  check_same_dtype(c, name, in, out);
  const std::int64_t n = in.numel();
  check_count(c, name, "out", out, std::int64_t(c.size) * n, "size() x the count of 'in'");
  // In place, NCCL's way: in is block rank() of out.
  const bool in_place = in.data_ptr() == bytes_at(out, std::int64_t(c.rank) * n);
  if (!in_place) check_disjoint(c, name, in, out, "'in' as block rank() of 'out' for an in-place all_gather");

  return c.enqueue(info_of(name, n, in.dtype()), {in, out}, [&](const PendingOp& p) {
    if (n == 0) return;
    c.nccl(p, "ncclAllGather", [&](ncclComm_t comm) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), std::size_t(n), to_nccl(in.dtype()), comm, c.stream());
    });
  });
}

WorkPtr NcclCommunicator::broadcast(Tensor& t, int root) {
  Impl& c = *impl_;
  const char* name = "broadcast";
  check_tensor(c, name, "t", t);
  check_rank(c, name, "root", root);
  const std::int64_t n = t.numel();

  return c.enqueue(info_of(name, n, t.dtype(), root), {t}, [&](const PendingOp& p) {
    if (n == 0) return;
    c.nccl(p, "ncclBroadcast", [&](ncclComm_t comm) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), std::size_t(n), to_nccl(t.dtype()), root, comm, c.stream());
    });
  });
}

WorkPtr NcclCommunicator::reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) {
  Impl& c = *impl_;
  const char* name = "reduce";
  check_tensor(c, name, "in", in);
  check_rank(c, name, "root", root);
  check_reduce_op(c, name, in.dtype(), op);
  const std::int64_t n = in.numel();
  const bool is_root = c.rank == root;
  if (is_root) {
    check_tensor(c, name, "out", out);
    check_same_dtype(c, name, in, out);
    check_count(c, name, "out", out, n, "the count of 'in'");
    if (in.data_ptr() != out.data_ptr()) check_disjoint(c, name, in, out, "the same tensor for an in-place reduce");
  }
  const bool widen = reduce_in_f32(in.dtype(), op) && n > 0;
  Tensor scratch = widen ? scratch_buffer(c, n) : Tensor();
  std::vector<Tensor> keep{in, scratch};
  if (is_root) keep.push_back(out);

  return c.enqueue(info_of(name, n, in.dtype(), root, "root", int(op)), std::move(keep), [&](const PendingOp& p) {
    if (n == 0) return;
    // Off the root NCCL ignores the receive buffer; the send buffer stands
    // in for it (as PyTorch's in-place reduce does), never a null pointer.
    const void* send = widen ? scratch.data_ptr() : in.data_ptr();
    void* recv = widen ? scratch.data_ptr() : is_root ? out.data_ptr() : in.data_ptr();
    if (widen) ops::cast(in, scratch);
    c.nccl(p, "ncclReduce", [&](ncclComm_t comm) {
      return ncclReduce(send, recv, std::size_t(n), widen ? ncclFloat32 : to_nccl(in.dtype()), to_nccl(op), root, comm,
                        c.stream());
    });
    if (widen && is_root) ops::cast(scratch, out);
  });
}

WorkPtr NcclCommunicator::all_to_all(const Tensor& in, Tensor& out) {
  Impl& c = *impl_;
  const char* name = "all_to_all";
  check_tensor(c, name, "in", in);
  check_tensor(c, name, "out", out);
  check_same_dtype(c, name, in, out);
  const std::int64_t total = in.numel();
  check_count(c, name, "out", out, total, "the count of 'in'");
  HT_CHECK(total % c.size == 0, ErrorKind::kShapeMismatch,
           "all_to_all on NCCL group '{}': 'in' holds {} elements, not a multiple of the group size {}", c.name, total,
           c.size);
  const std::int64_t n = total / c.size;
  const bool in_place = in.data_ptr() == out.data_ptr();
  if (!in_place) check_disjoint(c, name, in, out, "the same tensor for an in-place all_to_all");
  // Sends read `in` while receives write `out`: in place, send from a copy.
  Tensor source = in_place && total > 0 ? scratch_buffer(c, total, in.dtype()) : in;

  return c.enqueue(info_of(name, total, in.dtype()), {in, out, source}, [&](const PendingOp& p) {
    if (n == 0) return;
    if (in_place)
      HT_CUDA_CHECK(
          cudaMemcpyAsync(source.data_ptr(), in.data_ptr(), in.nbytes(), cudaMemcpyDeviceToDevice, c.stream()));
    const ncclDataType_t type = to_nccl(in.dtype());
    c.nccl(p, "ncclGroupEnd (all_to_all)", [&](ncclComm_t comm) {
      return in_group([&] {
        for (int peer = 0; peer < c.size; ++peer) {
          const std::int64_t at = std::int64_t(peer) * n;
          ncclResult_t r = ncclSend(bytes_at(source, at), std::size_t(n), type, peer, comm, c.stream());
          if (r == ncclSuccess) r = ncclRecv(bytes_at(out, at), std::size_t(n), type, peer, comm, c.stream());
          if (r != ncclSuccess) return r;
        }
        return ncclSuccess;
      });
    });
  });
}

// --- Point to point ---------------------------------------------------------------

WorkPtr NcclCommunicator::send(const Tensor& t, int peer) {
  Impl& c = *impl_;
  const char* name = "send";
  check_tensor(c, name, "t", t);
  check_rank(c, name, "peer", peer);
  HT_CHECK(peer != c.rank, ErrorKind::kInvalidArgument,
           "send on NCCL group '{}': rank {} sends to itself, which never completes alone; use "
           "send_recv(t, {}, out, {}) instead",
           c.name, peer, peer, peer);
  const std::int64_t n = t.numel();

  return c.enqueue(info_of(name, n, t.dtype(), peer, "peer", -1, false), {t}, [&](const PendingOp& p) {
    if (n == 0) return;
    c.nccl(p, "ncclSend", [&](ncclComm_t comm) {
      return ncclSend(t.data_ptr(), std::size_t(n), to_nccl(t.dtype()), peer, comm, c.stream());
    });
  });
}

WorkPtr NcclCommunicator::recv(Tensor& t, int peer) {
  Impl& c = *impl_;
  const char* name = "recv";
  check_tensor(c, name, "t", t);
  check_rank(c, name, "peer", peer);
  HT_CHECK(peer != c.rank, ErrorKind::kInvalidArgument,
           "recv on NCCL group '{}': rank {} receives from itself, which never completes alone; use "
           "send_recv(in, {}, t, {}) instead",
           c.name, peer, peer, peer);
  const std::int64_t n = t.numel();

  return c.enqueue(info_of(name, n, t.dtype(), peer, "peer", -1, false), {t}, [&](const PendingOp& p) {
    if (n == 0) return;
    c.nccl(p, "ncclRecv", [&](ncclComm_t comm) {
      return ncclRecv(t.data_ptr(), std::size_t(n), to_nccl(t.dtype()), peer, comm, c.stream());
    });
  });
}

WorkPtr NcclCommunicator::send_recv(const Tensor& send, int dst, Tensor& recv, int src) {
  Impl& c = *impl_;
  const char* name = "send_recv";
  check_tensor(c, name, "send", send);
  check_tensor(c, name, "recv", recv);
  check_rank(c, name, "dst", dst);
  check_rank(c, name, "src", src);
  HT_CHECK((dst == c.rank) == (src == c.rank), ErrorKind::kInvalidArgument,
           "send_recv on NCCL group '{}': rank {} sends to {} and receives from {}; a transfer with itself must go "
           "both ways (dst == src == rank) or it never completes",
           c.name, c.rank, dst, src);
  if (dst == c.rank) {
    check_same_dtype(c, name, send, recv);
    check_count(c, name, "recv", recv, send.numel(), "the count of 'send', for an exchange with itself");
  }
  HT_CHECK(!same_storage(send, recv), ErrorKind::kInvalidArgument,
           "send_recv on NCCL group '{}': 'send' and 'recv' overlap; pass disjoint tensors", c.name);
  const std::int64_t n_send = send.numel();
  const std::int64_t n_recv = recv.numel();

  return c.enqueue(info_of(name, n_send, send.dtype(), dst, "peer", -1, false), {send, recv}, [&](const PendingOp& p) {
    if (n_send == 0 && n_recv == 0) return;
    c.nccl(p, "ncclGroupEnd (send_recv)", [&](ncclComm_t comm) {
      return in_group([&] {
        ncclResult_t r = ncclSuccess;
        if (n_send > 0)
          r = ncclSend(send.data_ptr(), std::size_t(n_send), to_nccl(send.dtype()), dst, comm, c.stream());
        if (r == ncclSuccess && n_recv > 0)
          r = ncclRecv(recv.data_ptr(), std::size_t(n_recv), to_nccl(recv.dtype()), src, comm, c.stream());
        return r;
      });
    });
  });
}

WorkPtr NcclCommunicator::barrier() {
  Impl& c = *impl_;
  // Read under the enqueue lock, after check_usable (finalize releases it).
  return c.enqueue(info_of("barrier", 0, DType::kF32), {}, [&](const PendingOp& p) {
    void* word = c.barrier_buffer().data_ptr();
    c.nccl(p, "ncclAllReduce (barrier)",
           [&](ncclComm_t comm) { return ncclAllReduce(word, word, 1, ncclInt32, ncclSum, comm, c.stream()); });
  });
}

}  // namespace ht::comm
