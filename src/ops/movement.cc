// Slices along a dimension and transposes: validation, then the drivers'
// two primitives: a copy of rows (outer slices as rows, the slice's
// contiguous run as width) and a 5-d transpose (a, n0, b, n1, c).
#include "ht/ops/movement.h"

#include <utility>

#include "ops/axis.h"
#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops {
namespace {

int resolve_dim(const char* op, const Tensor& t, int dim) {
  const int nd = t.ndim();
  HT_CHECK(dim >= -nd && dim < nd, ErrorKind::kInvalidArgument, "{}: dim {} is outside a tensor of shape {}", op,
           dim, shape_str(t.shape()));
  return dim < 0 ? dim + nd : dim;
}

void check_element_size(const char* op, const Tensor& t) {
  HT_CHECK(dtype_size(t.dtype()) == 2 || dtype_size(t.dtype()) == 4, ErrorKind::kDTypeMismatch,
           "{}: {} has elements of {} bytes; only 2- and 4-byte dtypes move", op, dtype_name(t.dtype()),
           dtype_size(t.dtype()));
}

/// Checks `whole` and `part` agree but along `dim`, where part's slice
/// [start, start + part.size(dim)) must lie in whole; then copies it.
void slice_copy(const char* op, const Tensor& whole, const Tensor& part, int dim, std::int64_t start,
                bool into_whole, Tensor& dst) {
  const Device dev = detail::check_same_device(op, {{"whole", &whole}, {"part", &part}});
  dim = resolve_dim(op, whole, dim);
  HT_CHECK(whole.dtype() == part.dtype(), ErrorKind::kDTypeMismatch, "{}: dtypes {} and {} differ", op,
           dtype_name(whole.dtype()), dtype_name(part.dtype()));
  check_element_size(op, whole);
  Shape want = whole.shape();
  want[std::size_t(dim)] = part.ndim() == whole.ndim() ? part.size(dim) : -1;
  HT_CHECK(part.shape() == want, ErrorKind::kShapeMismatch,
           "{}: a slice of {} along dim {} must have its other dimensions, got {}", op, shape_str(whole.shape()), dim,
           shape_str(part.shape()));
  const std::int64_t len = part.size(dim), size = whole.size(dim);
  HT_CHECK(start >= 0 && start + len <= size, ErrorKind::kOutOfRange,
           "{}: the slice [{}, {}) along dim {} is outside its size {}", op, start, start + len, dim, size);
  const detail::AxisSplit w = detail::split_axis(whole.shape(), dim);
  const std::int64_t whole_pitch = size * w.inner, part_pitch = len * w.inner, at = start * w.inner;
  if (into_whole)
    HT_DISPATCH(dev, copy_rows, part, 0, part_pitch, dst, at, whole_pitch, w.outer, part_pitch);
  else
    HT_DISPATCH(dev, copy_rows, whole, at, whole_pitch, dst, 0, part_pitch, w.outer, part_pitch);
}

}  // namespace

void narrow(const Tensor& x, int dim, std::int64_t start, Tensor& out) {
  slice_copy("narrow", x, out, dim, start, /*into_whole=*/false, out);
}

Tensor narrow_copy(const Tensor& x, int dim, std::int64_t start, std::int64_t length) {
  Shape shape = x.shape();
  const int d = resolve_dim("narrow", x, dim);
  shape[std::size_t(d)] = length;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device(), MemCategory::kActivations);
  narrow(x, d, start, out);
  return out;
}

void narrow_into(const Tensor& part, int dim, std::int64_t start, Tensor& out) {
  slice_copy("narrow_into", out, part, dim, start, /*into_whole=*/true, out);
}

void transpose(const Tensor& x, int d0, int d1, Tensor& out) {
  const char* op = "transpose";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"out", &out}});
  d0 = resolve_dim(op, x, d0);
  d1 = resolve_dim(op, x, d1);
  if (d0 > d1) std::swap(d0, d1);
  HT_CHECK(x.dtype() == out.dtype(), ErrorKind::kDTypeMismatch, "{}: dtypes {} and {} differ", op,
           dtype_name(x.dtype()), dtype_name(out.dtype()));
  check_element_size(op, x);
  Shape want = x.shape();
  std::swap(want[std::size_t(d0)], want[std::size_t(d1)]);
  detail::check_shape(op, "out", out, want);
  // (a, n0, b, n1, c) around the two dimensions.
  std::int64_t dims[5] = {1, x.ndim() ? x.size(d0) : 1, 1, x.ndim() ? x.size(d1) : 1, 1};
  for (int d = 0; d < x.ndim(); ++d) {
    if (d < d0) dims[0] *= x.size(d);
    if (d > d0 && d < d1) dims[2] *= x.size(d);
    if (d > d1) dims[4] *= x.size(d);
  }
  if (x.numel() == 0) return;
  HT_DISPATCH(dev, transpose, x, dims, out);
}

}  // namespace ht::ops
