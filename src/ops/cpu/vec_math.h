// Private: exp and the logistic function written so that GCC vectorises the
// loops that call them. glibc's expf and tanhf are scalar calls unless built
// with -ffast-math, and under the default -ftrapping-math GCC will not turn a
// float comparison into a vector select either, so the clamping here works
// on the bit patterns with integer compares only. Used by the host GELU,
// softmax and cross-entropy loops, where the scalar calls took about a third
// of a training step of the small GPT (docs/benchmarks.md).
#pragma once

#include <bit>
#include <cstdint>
#include <cstdlib>  // for __GLIBC__, which ifunc dispatch needs

/// Marks a loop function to be compiled twice, for AVX2 and for the baseline,
/// with the choice made once at load time (GCC/Clang function multiversioning
/// on x86-64 glibc). AVX2 without FMA: no contraction of a * b + c, so both
/// versions give the same bits for element-wise loops; the AVX2 one is about
/// twice as fast for the GELU loops (1.5M elements: 4.0 ms -> 2.0 ms).
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define HT_CPU_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef HT_CPU_MULTIVERSION
#define HT_CPU_MULTIVERSION
#endif

namespace ht::ops::cpu {

/// e^z within 1 ulp of the correctly rounded result for z in [-87.3, 88.7]
/// (checked against double-precision exp on 2e7 points); 0 below -87.3 (where
/// e^z would be denormal) and e^88.7, about 3.3e38, above 88.7 and for NaN.
/// Cody-Waite reduction z = n ln2 + r with |r| <= ln2 / 2, a degree-7 Taylor
/// polynomial for e^r (truncation error r^8 / 8! < 6e-9, a tenth of an ulp),
/// then 2^n built in the exponent bits. No branches, tables or calls.
inline float vexp(float z) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 to 9 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr std::int32_t kLowBits = std::bit_cast<std::int32_t>(87.3f);
  constexpr std::int32_t kHighBits = std::bit_cast<std::int32_t>(88.7f);
  constexpr std::int32_t kSign = std::int32_t(0x80000000u);
  // Clamp to [-87.3, 88.7] on the sign-magnitude bits (integer compares).
  const std::int32_t bits = std::bit_cast<std::int32_t>(z);
  const std::int32_t magnitude = bits & 0x7fffffff;
  const std::int32_t limit = bits < 0 ? kLowBits : kHighBits;
  const std::int32_t outside = magnitude > limit ? -1 : 0;  // masks: all ones or zero
  const std::int32_t underflow = outside & (bits >> 31);     // all ones: the result is 0
  z = std::bit_cast<float>((bits & ~outside) | (((bits & kSign) | limit) & outside));

  const float shifted = z * kLog2e + kRound;
  const float n = shifted - kRound;  // round(z / ln 2), exactly
  const float r = (z - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // n lies in [-126, 128]; 2^n as two factors 2^(n/2) 2^(n - n/2), each a
  // normal float, so that n = 128 does not overflow the exponent field.
  const std::int32_t ni = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kRound);
  const std::int32_t half = ni >> 1;
  const float result = p * std::bit_cast<float>((half + 127) << 23) * std::bit_cast<float>((ni - half + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(result) & ~underflow);
}

/// 1 / (1 + e^-v), the logistic function; 0.5 * (1 + tanh(u)) == sigmoid(2u).
inline float vsigmoid(float v) { return 1.f / (1.f + vexp(-v)); }

}  // namespace ht::ops::cpu
