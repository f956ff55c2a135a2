// Private: bulk conversions between f32 and the 16-bit dtypes on the host, for
// the CPU drivers that compute f16/bf16 ops block by block or row by row in
// f32 buffers. The same converters as ops::cast (F16C where the CPU has it).
#pragma once

#include <cstdint>

#include "ht/core/dtype.h"

namespace ht::ops::cpu {

/// dst[0, n) = src[0, n) of `dtype` (f32, f16 or bf16) as float, exactly.
void widen(DType dtype, const void* src, float* dst, std::int64_t n);
/// dst[0, n) of `dtype` = src[0, n) rounded to nearest even (a copy for f32).
void narrow(const float* src, DType dtype, void* dst, std::int64_t n);

}  // namespace ht::ops::cpu
