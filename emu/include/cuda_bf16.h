// The emulated device's __nv_bfloat16: the top 16 bits of an IEEE float,
// converted with round-to-nearest-even as __float2bfloat16_rn does.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  std::uint16_t x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const std::uint32_t bits = std::uint32_t(h.x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return {std::uint16_t((u >> 16) | 0x40u)};  // NaN stays NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return {std::uint16_t(u >> 16)};
}

inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
