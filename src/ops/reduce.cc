// Sum/mean along one dimension: validation and dispatch; f16 and bf16 calls
// run the f32 drivers through F32Staging. Drivers get `dim` counted from 0.
#include "ht/ops/reduce.h"

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {

const char* reduction_name(Reduction r) { return r == Reduction::kMean ? "mean" : "sum"; }

}  // namespace

void reduce(const Tensor& x, int dim, Reduction reduction, Tensor& out) {
  const char* op = "reduce";
  const Device dev = detail::check_same_device(op, {{"x", &x}, {"out", &out}});
  detail::check_compute_dtype(op, {{"x", &x}, {"out", &out}});
  HT_CHECK(x.ndim() >= 1, ErrorKind::kShapeMismatch, "{}: x {} has no dimension to reduce over", op,
           shape_str(x.shape()));
  dim = detail::check_dim(op, "x", x.shape(), x.ndim(), dim);
  Shape want = x.shape();
  want.erase(want.begin() + dim);
  HT_CHECK(out.shape() == want, ErrorKind::kShapeMismatch,
           "{}: 'out' must have shape {} (x {} without dimension {}), got {}", op, shape_str(want),
           shape_str(x.shape()), dim, shape_str(out.shape()));
  HT_CHECK_ARG(reduction != Reduction::kMean || x.size(dim) > 0,
               "{}: the mean over dimension {} of x {} is a mean of no elements", op, dim, shape_str(x.shape()));
  detail::F32Staging s;
  HT_DISPATCH(dev, reduce, s.in(x), dim, reduction, s.out(out, detail::Staged::kOverwrite));
  s.commit();
}

void reduce_backward(const Tensor& dout, int dim, std::int64_t size, Reduction reduction, Tensor& dx) {
  const char* op = "reduce_backward";
  const Device dev = detail::check_same_device(op, {{"dout", &dout}, {"dx", &dx}});
  detail::check_compute_dtype(op, {{"dout", &dout}, {"dx", &dx}});
  dim = detail::check_dim(op, "dx", dx.shape(), dout.ndim() + 1, dim);
  HT_CHECK_ARG(size >= 0, "{}: size {} of the reduced dimension must not be negative", op, size);
  Shape want = dout.shape();
  want.insert(want.begin() + dim, size);
  HT_CHECK(dx.shape() == want, ErrorKind::kShapeMismatch,
           "{}: 'dx' must have shape {} (dout {} with the {} {} elements of dimension {} put back), got {}", op,
           shape_str(want), shape_str(dout.shape()), reduction_name(reduction), size, dim, shape_str(dx.shape()));
  detail::F32Staging s;
  HT_DISPATCH(dev, reduce_backward, s.in(dout), dim, reduction, s.out(dx, detail::Staged::kOverwrite));
  s.commit();
}

}  // namespace ht::ops
