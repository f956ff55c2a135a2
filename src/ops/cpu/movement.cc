// Host slices and transposes: rows of contiguous elements moved with
// memcpy, and the transpose by rows of its innermost run (c elements), in
// parallel over the output.
#include <cstring>

#include "ops/backend_ops.h"

namespace ht::ops::cpu {

void copy_rows(const Tensor& src, std::int64_t src_at, std::int64_t src_pitch, Tensor& dst, std::int64_t dst_at,
               std::int64_t dst_pitch, std::int64_t rows, std::int64_t width) {
  const std::int64_t e = std::int64_t(dtype_size(src.dtype()));
  const char* s = static_cast<const char*>(src.data_ptr()) + src_at * e;
  char* d = static_cast<char*>(dst.data_ptr()) + dst_at * e;
#pragma omp parallel for schedule(static) if (rows * width > (1 << 16))
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dst_pitch * e, s + r * src_pitch * e, std::size_t(width * e));
}

void transpose(const Tensor& x, const std::int64_t* dims, Tensor& out) {
  const std::int64_t a = dims[0], n0 = dims[1], b = dims[2], n1 = dims[3], c = dims[4];
  const std::int64_t e = std::int64_t(dtype_size(x.dtype()));
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  // Output row (ia, j1, ib, j0) holds c elements of input row (ia, j0, ib, j1).
  const std::int64_t rows = a * n1 * b * n0;
#pragma omp parallel for schedule(static) if (rows * c > (1 << 16))
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t j0 = r % n0, ib = (r / n0) % b, j1 = (r / (n0 * b)) % n1, ia = r / (n0 * b * n1);
    const std::int64_t in_row = ((ia * n0 + j0) * b + ib) * n1 + j1;
    std::memcpy(dst + r * c * e, src + in_row * c * e, std::size_t(c * e));
  }
}

}  // namespace ht::ops::cpu
