// The argument checks shared by the MPI and NCCL communicators (see
// collective_args.h): counts per operation, dtypes, ranks, overlap and the
// reductions no backend supports.
#include "comm/collective_args.h"

#include <fmt/format.h>

#include <cstdint>

namespace ht::comm::detail {
namespace {

/// Defined, then wherever the backend wants it.
void check_tensor(const CollectiveGroup& g, const char* op, const Tensor& t, std::string_view arg) {
  if (!t.defined())
    throw_argument_error(g, op, ErrorKind::kInvalidArgument,
                         fmt::format("{} is an undefined tensor; pass an allocated tensor", arg));
  g.placement(g, op, t, arg);
}

void check_same_dtype(const CollectiveGroup& g, const char* op, const Tensor& a, std::string_view a_name,
                      const Tensor& b, std::string_view b_name) {
  if (a.dtype() != b.dtype())
    throw_argument_error(g, op, ErrorKind::kDTypeMismatch,
                         fmt::format("{} is {} but {} is {}; they must match: convert one with ht::ops::cast first",
                                     a_name, dtype_name(a.dtype()), b_name, dtype_name(b.dtype())));
}

/// `t` must hold `expected` elements; `rule` says why, with the values.
void check_count(const CollectiveGroup& g, const char* op, const Tensor& t, std::string_view arg,
                 std::int64_t expected, const std::string& rule) {
  if (t.numel() != expected)
    throw_argument_error(g, op, ErrorKind::kShapeMismatch,
                         fmt::format("{} holds {} elements (shape {}) but must hold {}: {}", arg, t.numel(),
                                     shape_str(t.shape()), expected, rule));
}

void check_rank(const CollectiveGroup& g, const char* op, const char* what, int r) {
  if (r < 0 || r >= g.size)
    throw_argument_error(g, op, ErrorKind::kOutOfRange,
                         fmt::format("{} {} is not a rank of the group; its ranks are 0 to {}", what, r, g.size - 1));
}

/// Both backends promise the same reductions: an integer mean would have to round.
void check_reduce_op(const CollectiveGroup& g, const char* op, DType dtype, ReduceOp reduce_op) {
  if (dtype == DType::kI32 && reduce_op == ReduceOp::kAvg)
    throw_argument_error(g, op, ErrorKind::kNotSupported,
                         "avg of i32 is not supported (an integer mean would have to round): reduce with sum and "
                         "divide, or convert to f32");
}

/// `a` and `b` (in and out, either way round) must not share bytes, except
/// when `b` starts exactly at `b_in_place`: the operation's in-place layout,
/// which `in_place` describes.
void check_overlap(const CollectiveGroup& g, const char* op, const Tensor& a, const Tensor& b, const void* b_in_place,
                   const char* in_place) {
  if (a.nbytes() == 0 || b.nbytes() == 0 || !same_storage(a, b)) return;
  if (b.data_ptr() == b_in_place) return;
  throw_argument_error(g, op, ErrorKind::kInvalidArgument,
                       fmt::format("'in' and 'out' overlap; pass tensors that do not overlap, or {}", in_place));
}

/// The address of element `index` of `t`.
const void* element_at(const Tensor& t, std::int64_t index) {
  return static_cast<const char*>(t.data_ptr()) + index * std::int64_t(dtype_size(t.dtype()));
}

/// in and out of one dtype, both checked.
void check_in_out(const CollectiveGroup& g, const char* op, const Tensor& in, const Tensor& out) {
  check_tensor(g, op, in, "'in'");
  check_tensor(g, op, out, "'out'");
  check_same_dtype(g, op, in, "'in'", out, "'out'");
}

}  // namespace

void throw_argument_error(const CollectiveGroup& g, const char* op, ErrorKind kind, const std::string& what) {
  throw Error(kind, fmt::format("{} on {} group '{}' (rank {} of {}): {}", op, g.backend, g.name, g.rank, g.size, what));
}

void check_all_reduce_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out, ReduceOp op) {
  const char* name = "all_reduce";
  check_in_out(g, name, in, out);
  check_count(g, name, out, "'out'", in.numel(), "the count of 'in'");
  check_reduce_op(g, name, in.dtype(), op);
  check_overlap(g, name, in, out, in.data_ptr(), "the same tensor as 'in' and 'out' for an in-place all_reduce");
}

void check_reduce_scatter_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out, ReduceOp op) {
  const char* name = "reduce_scatter";
  check_in_out(g, name, in, out);
  const std::int64_t n = out.numel();
  check_count(g, name, in, "'in'", std::int64_t(g.size) * n,
              fmt::format("size() x the count of 'out' = {} x {}", g.size, n));
  check_reduce_op(g, name, in.dtype(), op);
  check_overlap(g, name, in, out, element_at(in, std::int64_t(g.rank) * n),
                "'out' as block rank() of 'in' for an in-place reduce_scatter");
}

void check_all_gather_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out) {
  const char* name = "all_gather";
  check_in_out(g, name, in, out);
  const std::int64_t n = in.numel();
  check_count(g, name, out, "'out'", std::int64_t(g.size) * n,
              fmt::format("size() x the count of 'in' = {} x {}", g.size, n));
  // In place, 'in' is the block inside 'out': the roles swap.
  check_overlap(g, name, out, in, element_at(out, std::int64_t(g.rank) * n),
                "'in' as block rank() of 'out' for an in-place all_gather");
}

void check_broadcast_args(const CollectiveGroup& g, const Tensor& t, int root) {
  check_tensor(g, "broadcast", t, "'t'");
  check_rank(g, "broadcast", "root", root);
}

void check_reduce_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out, ReduceOp op, int root) {
  const char* name = "reduce";
  check_tensor(g, name, in, "'in'");
  check_rank(g, name, "root", root);
  check_reduce_op(g, name, in.dtype(), op);
  if (g.rank != root) return;
  check_tensor(g, name, out, "'out' (on the root)");
  check_same_dtype(g, name, in, "'in'", out, "'out'");
  check_count(g, name, out, "'out'", in.numel(), "the count of 'in'");
  check_overlap(g, name, in, out, in.data_ptr(), "the same tensor as 'in' and 'out' for an in-place reduce");
}

void check_all_to_all_args(const CollectiveGroup& g, const Tensor& in, const Tensor& out) {
  const char* name = "all_to_all";
  check_in_out(g, name, in, out);
  check_count(g, name, out, "'out'", in.numel(), "the count of 'in'");
  if (in.numel() % g.size != 0)
    throw_argument_error(g, name, ErrorKind::kShapeMismatch,
                         fmt::format("'in' holds {} elements, not a multiple of the group size {}: it must hold "
                                     "size() blocks of equal length",
                                     in.numel(), g.size));
  check_overlap(g, name, in, out, in.data_ptr(), "the same tensor as 'in' and 'out' for an in-place all_to_all");
}

void check_all_to_all_v_args(const CollectiveGroup& g, const Tensor& in, const std::vector<std::int64_t>& send_counts,
                             const Tensor& out, const std::vector<std::int64_t>& recv_counts) {
  const char* name = "all_to_all_v";
  check_in_out(g, name, in, out);
  for (const auto* counts : {&send_counts, &recv_counts}) {
    const char* which = counts == &send_counts ? "send_counts" : "recv_counts";
    if (counts->size() != std::size_t(g.size))
      throw_argument_error(g, name, ErrorKind::kInvalidArgument,
                           fmt::format("{} has {} entries for a group of {}: give one per rank", which,
                                       counts->size(), g.size));
    std::int64_t total = 0;
    for (std::int64_t c : *counts) {
      if (c < 0)
        throw_argument_error(g, name, ErrorKind::kInvalidArgument, fmt::format("{} holds {}: counts are >= 0", which, c));
      total += c;
    }
    const Tensor& t = counts == &send_counts ? in : out;
    if (total != t.numel())
      throw_argument_error(g, name, ErrorKind::kShapeMismatch,
                           fmt::format("{} add up to {} elements, but '{}' holds {}", which, total,
                                       counts == &send_counts ? "in" : "out", t.numel()));
  }
  check_overlap(g, name, in, out, nullptr, "none: all_to_all_v is not in place");
}

void check_point_to_point_args(const CollectiveGroup& g, const char* op, const Tensor& t, int peer) {
  check_tensor(g, op, t, "'t'");
  check_rank(g, op, "peer", peer);
}

void check_send_recv_args(const CollectiveGroup& g, const Tensor& send, int dst, const Tensor& recv, int src) {
  const char* name = "send_recv";
  check_tensor(g, name, send, "'send'");
  check_tensor(g, name, recv, "'recv'");
  check_rank(g, name, "dst", dst);
  check_rank(g, name, "src", src);
}

}  // namespace ht::comm::detail
