// NcclCommunicator's operations: argument validation (comm/collective_args.h
// and NCCL's own rules), then the NCCL calls enqueued on the communicator's
// stream (see nccl_state.h for the machinery).
#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/collective_args.h"
#include "comm/nccl_state.h"
#include "ht/ops/cast.h"

namespace ht::comm {

using detail::CollectiveGroup;
using detail::OpInfo;
using detail::PendingOp;
using detail::throw_argument_error;
using detail::to_nccl;

namespace {

using Impl = NcclCommunicator::Impl;

// --- Validation -----------------------------------------------------------------
// The checks every backend shares are in comm/collective_args.h; here only
// what is NCCL's own: where tensors live, and point-to-point with itself.

/// A NCCL communicator works on tensors of its one CUDA device.
void check_on_device(const CollectiveGroup& g, const char* op, const Tensor& t, std::string_view arg) {
  if (t.device() != g.device)
    throw_argument_error(g, op, ErrorKind::kDeviceMismatch,
                         fmt::format("{} is on {} but the communicator works on {}; move it there with "
                                     ".to(Device::cuda({})), or use the MPI communicator for host tensors",
                                     arg, t.device().str(), g.device.str(), g.device.index));
}

/// What NCCL cannot do in a send_recv that the MPI backend can (it buffers a
/// message to itself and copies overlapping tensors): a transfer with itself
/// must go both ways and match, and 'send' and 'recv' must be disjoint.
void check_send_recv_on_nccl(const CollectiveGroup& g, const Tensor& send, int dst, const Tensor& recv, int src) {
  const char* name = "send_recv";
  if ((dst == g.rank) != (src == g.rank))
    throw_argument_error(g, name, ErrorKind::kInvalidArgument,
                         fmt::format("rank {} sends to {} and receives from {}; a transfer with itself must go both "
                                     "ways (dst == src == rank) or it never completes",
                                     g.rank, dst, src));
  if (dst == g.rank && send.dtype() != recv.dtype())
    throw_argument_error(g, name, ErrorKind::kDTypeMismatch,
                         fmt::format("'send' is {} but 'recv' is {}, in an exchange with itself; they must match: "
                                     "convert one with ht::ops::cast first",
                                     dtype_name(send.dtype()), dtype_name(recv.dtype())));
  if (dst == g.rank && send.numel() != recv.numel())
    throw_argument_error(g, name, ErrorKind::kShapeMismatch,
                         fmt::format("'recv' holds {} elements (shape {}) but must hold {}: the count of 'send', for "
                                     "an exchange with itself",
                                     recv.numel(), shape_str(recv.shape()), send.numel()));
  if (same_storage(send, recv))
    throw_argument_error(g, name, ErrorKind::kInvalidArgument, "'send' and 'recv' overlap; pass disjoint tensors");
}

/// The group as the shared argument checks name it.
CollectiveGroup group_of(const Impl& c) {
  return CollectiveGroup{"NCCL", c.name, c.rank, c.size, Device::cuda(c.device), &check_on_device};
}

char* bytes_at(Tensor& t, std::int64_t elements) {
  return static_cast<char*>(t.data_ptr()) + elements * std::int64_t(dtype_size(t.dtype()));
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
  detail::check_all_reduce_args(group_of(c), in, out, op);
  const std::int64_t n = in.numel();
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
  detail::check_reduce_scatter_args(group_of(c), in, out, op);
  const std::int64_t n = out.numel();
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
  detail::check_all_gather_args(group_of(c), in, out);
  const std::int64_t n = in.numel();

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
  detail::check_broadcast_args(group_of(c), t, root);
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
  detail::check_reduce_args(group_of(c), in, out, op, root);
  const std::int64_t n = in.numel();
  const bool is_root = c.rank == root;
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

WorkPtr NcclCommunicator::all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                                       const std::vector<std::int64_t>& recv_counts) {
  Impl& c = *impl_;
  const char* name = "all_to_all_v";
  detail::check_all_to_all_v_args(group_of(c), in, send_counts, out, recv_counts);
  Tensor from = in;  // a handle of the same storage, to take addresses in
  // The ranks' counts differ: the debug check compares the group's size.
  return c.enqueue(info_of(name, c.size, in.dtype()), {in, out}, [&](const PendingOp& p) {
    const ncclDataType_t type = to_nccl(in.dtype());
    c.nccl(p, "ncclGroupEnd (all_to_all_v)", [&](ncclComm_t comm) {
      return in_group([&] {
        std::int64_t sent = 0, received = 0;
        for (int peer = 0; peer < c.size; ++peer) {
          // An empty block on one side is empty on the other: both skip it.
          const std::int64_t s = send_counts[std::size_t(peer)], r = recv_counts[std::size_t(peer)];
          ncclResult_t result = ncclSuccess;
          if (s > 0) result = ncclSend(bytes_at(from, sent), std::size_t(s), type, peer, comm, c.stream());
          if (result == ncclSuccess && r > 0)
            result = ncclRecv(bytes_at(out, received), std::size_t(r), type, peer, comm, c.stream());
          if (result != ncclSuccess) return result;
          sent += s;
          received += r;
        }
        return ncclSuccess;
      });
    });
  });
}

WorkPtr NcclCommunicator::all_to_all(const Tensor& in, Tensor& out) {
  Impl& c = *impl_;
  const char* name = "all_to_all";
  detail::check_all_to_all_args(group_of(c), in, out);
  const std::int64_t total = in.numel();
  const std::int64_t n = total / c.size;
  const bool in_place = in.data_ptr() == out.data_ptr();
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
  const CollectiveGroup g = group_of(c);
  detail::check_point_to_point_args(g, name, t, peer);
  if (peer == c.rank)
    throw_argument_error(g, name, ErrorKind::kInvalidArgument,
                         fmt::format("rank {} sends to itself, which never completes alone; use send_recv(t, {}, out, "
                                     "{}) instead",
                                     peer, peer, peer));
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
  const CollectiveGroup g = group_of(c);
  detail::check_point_to_point_args(g, name, t, peer);
  if (peer == c.rank)
    throw_argument_error(g, name, ErrorKind::kInvalidArgument,
                         fmt::format("rank {} receives from itself, which never completes alone; use send_recv(in, "
                                     "{}, t, {}) instead",
                                     peer, peer, peer));
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
  const CollectiveGroup g = group_of(c);
  detail::check_send_recv_args(g, send, dst, recv, src);
  check_send_recv_on_nccl(g, send, dst, recv, src);
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
