// Private: argument validation shared by the public ops. Each check throws an
// ht::Error that names the op, the argument and the values involved.
#pragma once

#include <initializer_list>
#include <utility>

#include "ht/core/tensor.h"
#include "ht/ops/vocab_shard.h"

namespace ht::ops::detail {

using Named = std::pair<const char*, const Tensor*>;

/// Every tensor defined and on one device; returns that device.
Device check_same_device(const char* op, std::initializer_list<Named> tensors);
void check_dtype(const char* op, const char* name, const Tensor& t, DType expected);
void check_float_dtype(const char* op, const char* name, const Tensor& t);
/// The compute dtype of a call (ht/ops/compute_dtype.h): every defined tensor
/// in `tensors` is f32, f16 or bf16, all the same; returns it (f32 if none is
/// defined). Throws kDTypeMismatch naming the first tensor that differs from
/// the first one, or one that is not a float dtype.
DType check_compute_dtype(const char* op, std::initializer_list<Named> tensors);
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected);
void check_ndim(const char* op, const char* name, const Tensor& t, int ndim);
void check_numel(const char* op, const char* name, const Tensor& t, std::int64_t numel);
/// A scalar flag/accumulator: one f32 element.
void check_scalar_f32(const char* op, const char* name, const Tensor& t);
/// Dimension `dim` of a tensor of `ndim` dimensions (shape `shape`, the
/// argument `name`) counted from 0, with negative values counting from the
/// end as in Tensor::size. Throws kInvalidArgument naming the valid range.
int check_dim(const char* op, const char* name, const Shape& shape, int ndim, int dim);
/// Throws kOutOfRange for index `value` at `position` of the index tensor,
/// outside [0, bound) = dimension `dim` of the tensor `name` of `shape`: the
/// one message of the gather/scatter ops' index checks on both devices.
[[noreturn]] void throw_bad_index(const char* op, std::int32_t value, std::int64_t position, std::int64_t bound,
                                  int dim, const char* name, const Shape& shape);
/// The shard of a vocabulary whose local part has `rows` ids (the rows or
/// columns of tensor `name`), resolved: size -1 becomes `rows`, padded_size
/// -1 becomes size. Throws kInvalidArgument unless start >= 0 and start +
/// rows <= padded_size (and start == 0 when unsharded).
VocabShard check_vocab_shard(const char* op, const char* name, std::int64_t rows, VocabShard shard);

}  // namespace ht::ops::detail
