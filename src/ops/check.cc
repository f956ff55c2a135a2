// Argument validation for the public ops.
#include "ops/check.h"

#include "ht/ops/compute_dtype.h"
#include "ops/backend_ops.h"

namespace ht::ops::detail {

void no_cuda(const char* op) {
  throw Error(ErrorKind::kNotSupported,
              fmt::format("{}: tensors are on a CUDA device but this build of hypertrain has no CUDA "
                          "backend; rebuild with the CUDA toolkit (-DHT_WITH_CUDA=ON)",
                          op));
}

Device check_same_device(const char* op, std::initializer_list<Named> tensors) {
  const Named* first = nullptr;
  for (const Named& n : tensors) {
    HT_CHECK(n.second->defined(), ErrorKind::kInvalidArgument, "{}: tensor '{}' is undefined", op, n.first);
    if (!first) {
      first = &n;
    } else {
      HT_CHECK(n.second->device() == first->second->device(), ErrorKind::kDeviceMismatch,
               "{}: '{}' is on {} but '{}' is on {}; move them to one device with .to()", op, n.first,
               n.second->device().str(), first->first, first->second->device().str());
    }
  }
  return first ? first->second->device() : Device::cpu();
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType expected) {
  HT_CHECK(t.dtype() == expected, ErrorKind::kDTypeMismatch, "{}: '{}' must be {}, got {}", op, name,
           dtype_name(expected), dtype_name(t.dtype()));
}

void check_float_dtype(const char* op, const char* name, const Tensor& t) {
  HT_CHECK(is_floating(t.dtype()), ErrorKind::kDTypeMismatch, "{}: '{}' must be f32, f16 or bf16, got {}",
           op, name, dtype_name(t.dtype()));
}

DType check_compute_dtype(const char* op, std::initializer_list<Named> tensors) {
  const Named* first = nullptr;
  for (const Named& n : tensors) {
    if (!n.second->defined()) continue;
    const DType dt = n.second->dtype();
    HT_CHECK(is_compute_dtype(dt), ErrorKind::kDTypeMismatch,
             "{}: '{}' must be f32, f16 or bf16 (the call's compute dtype), got {}", op, n.first, dtype_name(dt));
    if (!first) {
      first = &n;
    } else {
      HT_CHECK(dt == first->second->dtype(), ErrorKind::kDTypeMismatch,
               "{}: '{}' is {} but '{}' is {}; activations, parameters and their gradients share one compute "
               "dtype per call: cast them to one with ht::ops::cast",
               op, n.first, dtype_name(dt), first->first, dtype_name(first->second->dtype()));
    }
  }
  return first ? first->second->dtype() : DType::kF32;
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected) {
  HT_CHECK(t.shape() == expected, ErrorKind::kShapeMismatch, "{}: '{}' must have shape {}, got {}", op, name,
           shape_str(expected), shape_str(t.shape()));
}

void check_ndim(const char* op, const char* name, const Tensor& t, int ndim) {
  HT_CHECK(t.ndim() == ndim, ErrorKind::kShapeMismatch, "{}: '{}' must be {}-d, got shape {}", op, name,
           ndim, shape_str(t.shape()));
}

void check_numel(const char* op, const char* name, const Tensor& t, std::int64_t numel) {
  HT_CHECK(t.numel() == numel, ErrorKind::kShapeMismatch, "{}: '{}' must have {} elements, got shape {}", op,
           name, numel, shape_str(t.shape()));
}

void check_scalar_f32(const char* op, const char* name, const Tensor& t) {
  check_dtype(op, name, t, DType::kF32);
  check_numel(op, name, t, 1);
}

int check_dim(const char* op, const char* name, const Shape& shape, int ndim, int dim) {
  HT_CHECK_ARG(dim >= -ndim && dim < ndim,
               "{}: dim {} is out of range for '{}' of shape {} ({} dimensions): pass a dim in [{}, {})", op, dim,
               name, shape_str(shape), ndim, -ndim, ndim);
  return dim < 0 ? dim + ndim : dim;
}

void throw_bad_index(const char* op, std::int32_t value, std::int64_t position, std::int64_t bound, int dim,
                     const char* name, const Shape& shape) {
  throw Error(ErrorKind::kOutOfRange,
              fmt::format("{}: index {} at position {} of 'index' is outside [0, {}), the size of dimension {} of "
                          "'{}' {}",
                          op, value, position, bound, dim, name, shape_str(shape)));
}

VocabShard check_vocab_shard(const char* op, const char* name, std::int64_t rows, VocabShard shard) {
  if (shard.size == -1) {
    HT_CHECK_ARG(shard.start == 0 && shard.padded_size == -1,
                 "{}: vocabulary shard start {} (padded size {}) with size -1 (unsharded): an unsharded '{}' holds "
                 "the whole vocabulary from id 0; pass the full vocabulary size with a shard's start or padding",
                 op, shard.start, shard.padded_size, name);
    return {0, rows, rows};
  }
  HT_CHECK_ARG(shard.size >= 0, "{}: vocabulary shard size {} must be -1 (unsharded) or the full vocabulary size",
               op, shard.size);
  if (shard.padded_size == -1) {
    HT_CHECK_ARG(shard.start >= 0 && shard.start <= shard.size - rows,
                 "{}: vocabulary shard [{}, {}) ('{}' holds {} ids from start {}) does not lie within the vocabulary "
                 "[0, {}); the shards of tp ranks must tile [0, size)",
                 op, shard.start, shard.start + rows, name, rows, shard.start, shard.size);
    return {shard.start, shard.size, shard.size};
  }
  HT_CHECK_ARG(shard.padded_size >= shard.size,
               "{}: padded vocabulary size {} is smaller than the vocabulary size {}: it counts the table's rows, "
               "real ids and padding",
               op, shard.padded_size, shard.size);
  HT_CHECK_ARG(shard.start >= 0 && shard.start <= shard.padded_size - rows,
               "{}: vocabulary shard [{}, {}) ('{}' holds {} rows from start {}) does not lie within the padded "
               "vocabulary [0, {}); the shards of tp ranks must tile [0, padded_size)",
               op, shard.start, shard.start + rows, name, rows, shard.start, shard.padded_size);
  return shard;
}

}  // namespace ht::ops::detail
