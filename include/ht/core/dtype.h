// Element types of tensors: f32, f16, bf16 (16-bit storage, f32 arithmetic)
// and i32 (token ids, targets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ht/core/half.h"

namespace ht {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32 };

constexpr std::size_t dtype_size(DType t) { return t == DType::kF16 || t == DType::kBF16 ? 2 : 4; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t != DType::kI32; }

/// Parses "f32", "fp32", "float32", "f16", "fp16", "bf16", "i32"; throws ht::Error otherwise.
DType parse_dtype(std::string_view name);

/// The DType of a C++ element type, for typed access checks.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::kI32; };

}  // namespace ht
