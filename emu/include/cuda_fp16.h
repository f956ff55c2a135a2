// The emulated device's __half: IEEE binary16 storage, converted with
// round-to-nearest-even as the device's __float2half_rn does.
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  std::uint16_t x;
};

inline float __half2float(__half h) {
  const std::uint32_t sign = std::uint32_t(h.x & 0x8000u) << 16;
  std::uint32_t exp = (h.x >> 10) & 0x1Fu, man = h.x & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);  // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline __half __float2half_rn(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return {std::uint16_t(sign | 0x7E00u)};    // NaN
  if (abs >= 0x477FF000u) return {std::uint16_t(sign | 0x7C00u)};   // rounds to inf
  if (abs < 0x33000001u) return {sign};                              // rounds to zero
  const int exp = int(abs >> 23);
  std::uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
  int shift = exp < 113 ? 126 - exp : 13;  // subnormal results shift further
  std::uint32_t h = exp < 113 ? 0 : std::uint32_t(exp - 112) << 10;
  const std::uint32_t rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
  man >>= shift;
  std::uint32_t out = h + (exp < 113 ? man : (man & 0x3FFu));
  if (rest > half || (rest == half && (out & 1u))) ++out;
  return {std::uint16_t(sign | out)};
}

inline __half __float2half(float f) { return __float2half_rn(f); }
