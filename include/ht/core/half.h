// 16-bit floating-point storage types (IEEE binary16 and bfloat16) and their
// conversions to and from float, written once for host and device.
//
// Both are storage only: arithmetic happens in float. Conversions from float
// round to nearest, ties to even, as hardware conversions do, so CPU and CUDA
// results agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "ht/core/macros.h"

namespace ht {

struct f16 {
  std::uint16_t bits;
};
struct bf16 {
  std::uint16_t bits;
};

HT_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HT_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

HT_HD float to_float(bf16 h) { return bits_float(std::uint32_t(h.bits) << 16); }

HT_HD bf16 to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{std::uint16_t((u >> 16) | 0x40u)};  // quiet NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{std::uint16_t(u >> 16)};
}

HT_HD float to_float(f16 h) {
  const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  const std::uint32_t man = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf, nan
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return bits_float(sign);  // signed zero
  // Subnormal half: value = man * 2^-24, exactly representable in float.
  const float v = float(man) * 5.9604644775390625e-08f;
  return sign ? -v : v;
}

HT_HD f16 to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{std::uint16_t(sign | 0x7e00u)};  // nan
  if (abs >= 0x477ff000u) return f16{std::uint16_t(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value / 2^-24 rounded to nearest even.
    // Adding 0.5 (2^-1) shifts the mantissa so the float adder does the rounding.
    const float shifted = bits_float(abs) + 0.5f;
    return f16{std::uint16_t(sign | std::uint16_t(float_bits(shifted) - 0x3f000000u))};
  }
  // Normal: rebias exponent (127 -> 15), round mantissa 23 -> 10 bits to nearest even.
  std::uint32_t r = abs - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return f16{std::uint16_t(sign | (r >> 13))};
}

}  // namespace ht
