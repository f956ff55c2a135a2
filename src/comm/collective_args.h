// Private: the argument checks of every Communicator operation, written once
// for the MPI and the NCCL backend so that both refuse the same calls with the
// same ErrorKind and the same words. Where a tensor may live (host or a CUDA
// device, size limits) is the backend's rule, passed in as a PlacementCheck.
#pragma once

#include <string>
#include <string_view>

#include "ht/comm/communicator.h"
#include "ht/core/error.h"
#include "ht/core/tensor.h"

namespace ht::comm::detail {

struct CollectiveGroup;

/// A backend's rule for where a (defined) tensor argument may live: throws,
/// through throw_argument_error, naming `op`, the group and `arg` (a display
/// name such as "'in'").
using PlacementCheck = void (*)(const CollectiveGroup& group, const char* op, const Tensor& t, std::string_view arg);

/// The group an operation runs on, as messages name it, and the backend's
/// placement rule. Built per call from the communicator; holds no ownership.
struct CollectiveGroup {
  const char* backend = "";  // "MPI", "NCCL"
  std::string_view name;     // "world", "dp.0"
  int rank = 0;
  int size = 1;
  Device device;             // where its tensors live: the host for MPI, cuda:d for NCCL
  PlacementCheck placement = nullptr;
};

/// Throws ht::Error(kind) with "<op> on <backend> group '<name>' (rank r of n): <what>".
[[noreturn]] void throw_argument_error(const CollectiveGroup& group, const char* op, ErrorKind kind,
                                       const std::string& what);

// The checks of each operation, in the Communicator's vocabulary (in, out, t,
// root, peer, dst, src). Each throws ht::Error:
//   kInvalidArgument  an undefined tensor; in and out overlapping other than
//                     in the operation's in-place layout
//   kDTypeMismatch    in and out of different dtypes
//   kShapeMismatch    element counts that do not fit the operation
//   kOutOfRange       a root or peer that is not a rank of the group
//   kNotSupported     a dtype and reduction the backends do not combine (avg of i32)
// and whatever the placement check throws (kDeviceMismatch, kNotSupported).
// Tensors are checked in argument order; nothing is enqueued by a check.

/// out holds as many elements as in; in place: the same tensor.
void check_all_reduce_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out, ReduceOp op);
/// in holds size x the elements of out; in place: out is block rank of in.
void check_reduce_scatter_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out, ReduceOp op);
/// out holds size x the elements of in; in place: in is block rank of out.
void check_all_gather_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out);
void check_broadcast_args(const CollectiveGroup& g, const Tensor& t, int root);
/// out is checked on the root only (elsewhere it is ignored).
void check_reduce_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out, ReduceOp op, int root);
/// in and out hold the same count, a multiple of the group size; in place: the same tensor.
void check_all_to_all_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out);
void check_all_to_all_v_args(const CollectiveGroup& g, const Tensor& in, const std::vector<std::int64_t>& send_counts,
                             const Tensor& out, const std::vector<std::int64_t>& recv_counts);
/// send (op "send") or recv (op "recv") of t with `peer`.
void check_point_to_point_args(const CollectiveGroup& g, const char* op, const Tensor& t, int peer);
/// send_recv: both tensors, dst and src. What a backend cannot do beyond that
/// (a transfer with itself, overlapping buffers) it checks itself.
void check_send_recv_args(const CollectiveGroup& g, const Tensor& send, int dst, const Tensor& recv, int src);

}  // namespace ht::comm::detail
