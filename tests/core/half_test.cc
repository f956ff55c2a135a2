// f16 and bf16 conversions against independent references: GCC's _Float16
// (x86-64, round to nearest even in libgcc) for f16, and for bf16 a rounding
// computed in double with std::nearbyint rather than with integer bit tricks.
#include "ht/core/half.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ht {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Inputs every conversion must get right: zeros, the f16 subnormal range and
// its boundaries, ties at every scale, the overflow threshold, specials.
std::vector<float> edge_floats() {
  std::vector<float> v = {
      0.f, -0.f, 1.f, -1.f, 0.5f, 2.f, 3.f, 1.f / 3.f, 0.1f, -0.1f,
      std::ldexp(1.f, -24),                               // smallest f16 subnormal
      std::ldexp(1.f, -25),                               // tie between 0 and it: rounds to 0 (even)
      std::nextafter(std::ldexp(1.f, -25), 1.f),          // just above the tie: rounds up
      std::nextafter(std::ldexp(1.f, -25), 0.f),          // just below: 0
      std::ldexp(3.f, -25),                               // tie between 1 and 2 ulps: 2 (even)
      std::ldexp(5.f, -25),                               // tie between 2 and 3 ulps: 2 (even)
      std::ldexp(1.f, -26), std::ldexp(1.f, -40), std::ldexp(1.f, -14),  // smallest f16 normal
      std::ldexp(1023.f, -24),                            // largest f16 subnormal
      std::ldexp(1023.5f, -24),                           // tie between it and the smallest normal
      std::nextafter(std::ldexp(1.f, -14), 0.f),
      std::ldexp(1.f, -15),
      1.f + std::ldexp(1.f, -11),                         // tie: rounds to 1 (even)
      1.f + std::ldexp(3.f, -11),                         // tie: rounds up to 1 + 2^-9 (even)
      std::nextafter(1.f + std::ldexp(1.f, -11), 2.f),
      2048.f + 1.f, 2048.f + 3.f, 4096.f + 2.f,
      65504.f,                                            // largest f16
      65519.99f,                                          // below the overflow tie: 65504
      65520.f,                                            // the tie with 65536: rounds to inf (even)
      std::nextafter(65520.f, 0.f), 65536.f, 70000.f, 1e10f, FLT_MAX,
      FLT_MIN, std::nextafter(0.f, 1.f), std::ldexp(1.f, -130),  // float subnormals
      std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      from_bits(0x7f800001u),                             // signalling NaN
      from_bits(0x7fffffffu), from_bits(0xffc00000u),     // NaN payloads, negative NaN
      // bf16 specifics: ties, the overflow boundary, its subnormals.
      from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0x3f808001u), from_bits(0x3f807fffu),
      from_bits(0x7f7f7fffu), from_bits(0x7f7f8000u),     // largest finite bf16 / the tie to inf
      from_bits(0x00008000u), from_bits(0x00018000u), from_bits(0x007fffffu), from_bits(0x00007fffu),
  };
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

// f16 ------------------------------------------------------------------------

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
#define HT_HAVE_FLOAT16 1

float ref_f16_decode(std::uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return float(h);
}

std::uint16_t ref_f16_encode(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

bool same_f16_encoding(float f, std::uint16_t got, std::uint16_t want) {
  if (std::isnan(f))  // any quiet NaN of the same sign will do
    return (got & 0x7c00u) == 0x7c00u && (got & 0x3ffu) != 0 && (got & 0x8000u) == (want & 0x8000u);
  return got == want;
}
#endif

TEST(F16, DecodesAllBitPatterns) {
#ifndef HT_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#else
  int checked = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float got = to_float(f16{std::uint16_t(b)});
    const float want = ref_f16_decode(std::uint16_t(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << b;
    } else {
      ASSERT_EQ(bits_of(got), bits_of(want)) << std::hex << "f16 bits 0x" << b << ": got " << got << ", want " << want;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 65536);
#endif
}

TEST(F16, EncodesEdgeCases) {
#ifndef HT_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#else
  for (float f : edge_floats()) {
    const std::uint16_t got = to_f16(f).bits, want = ref_f16_encode(f);
    EXPECT_TRUE(same_f16_encoding(f, got, want))
        << std::hex << "float 0x" << bits_of(f) << " (" << f << "): got 0x" << got << ", want 0x" << want;
  }
  // Spot values, so the reference itself is checked too.
  EXPECT_EQ(to_f16(65504.f).bits, 0x7bff);
  EXPECT_EQ(to_f16(65519.99f).bits, 0x7bff);
  EXPECT_EQ(to_f16(65520.f).bits, 0x7c00);
  EXPECT_EQ(to_f16(-0.f).bits, 0x8000);
  EXPECT_EQ(to_f16(std::ldexp(1.f, -25)).bits, 0x0000);
  EXPECT_EQ(to_f16(std::ldexp(3.f, -25)).bits, 0x0002);
  EXPECT_EQ(to_f16(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
#endif
}

TEST(F16, EncodesEveryTieAndItsNeighbours) {
#ifndef HT_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#else
  // For each finite non-negative f16 h, the float midway to the next f16 (exact
  // in float) and the floats one ulp either side of it.
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {
    const double lo = ref_f16_decode(std::uint16_t(b));
    const double hi = b + 1 == 0x7c00 ? 65536.0 : double(ref_f16_decode(std::uint16_t(b + 1)));
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)}) {
      for (float s : {f, -f}) {
        const std::uint16_t got = to_f16(s).bits, want = ref_f16_encode(s);
        ASSERT_EQ(got, want) << std::hex << "float 0x" << bits_of(s) << " (" << s << ")";
      }
    }
  }
#endif
}

TEST(F16, EncodesRandomFloats) {
#ifndef HT_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#else
  std::mt19937 rng(1234);
  // Half the draws are arbitrary bit patterns (every exponent, NaNs included),
  // half have an exponent in or near the f16 range, where rounding matters.
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_int_distribution<std::uint32_t> exp_near(127 - 27, 127 + 17);
  int mismatches = 0;
  for (int i = 0; i < 3'000'000; ++i) {
    std::uint32_t u = any(rng);
    if (i % 2) u = (u & 0x807fffffu) | (exp_near(rng) << 23);
    const float f = from_bits(u);
    const std::uint16_t got = to_f16(f).bits, want = ref_f16_encode(f);
    if (!same_f16_encoding(f, got, want) && ++mismatches <= 10)
      ADD_FAILURE() << std::hex << "float 0x" << u << " (" << f << "): got 0x" << got << ", want 0x" << want;
  }
  EXPECT_EQ(mismatches, 0);
#endif
}

TEST(F16, RoundTripsEveryFiniteValue) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const f16 h{std::uint16_t(b)};
    const float f = to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(to_f16(f).bits, b) << std::hex << b;
  }
}

// bf16 -----------------------------------------------------------------------

// The bf16 nearest to f, ties to even, by arithmetic in double: bf16 keeps
// float's exponent range with 8 significant bits, so the quantum at |f| in
// [2^e, 2^(e+1)) is 2^(max(e, -126) - 7); |f| / quantum is exact in double and
// std::nearbyint (default rounding mode) rounds it half to even.
std::uint16_t ref_bf16_encode(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return std::uint16_t(sign | 0x7fc0);
  if (std::isinf(f)) return std::uint16_t(sign | 0x7f80);
  const double a = std::fabs(double(f));
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int quantum_exp = std::max(e - 1, -126) - 7;
  const double n = std::nearbyint(std::ldexp(a, -quantum_exp));
  const double r = std::ldexp(n, quantum_exp);
  if (r >= std::ldexp(1.0, 128)) return std::uint16_t(sign | 0x7f80);
  const float rf = float(r);  // exact: r is a bf16 value
  EXPECT_EQ(double(rf), r);
  EXPECT_EQ(bits_of(rf) & 0xffffu, 0u);
  return std::uint16_t(sign | (bits_of(rf) >> 16));
}

// Decodes by the definition: (-1)^s 2^(e-127) (1 + m/128), subnormals m 2^-133.
double ref_bf16_decode(std::uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
  double v;
  if (e == 0xff) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp(double(m), -133);
  else v = std::ldexp(1.0 + m / 128.0, e - 127);
  return s ? -v : v;
}

void expect_bf16_encoding(float f) {
  const std::uint16_t got = to_bf16(f).bits, want = ref_bf16_encode(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(std::isnan(to_float(bf16{got}))) << std::hex << bits_of(f);
    EXPECT_EQ(got & 0x8000u, want & 0x8000u) << std::hex << bits_of(f);
    EXPECT_NE(got & 0x0040u, 0u) << "NaN must be quiet: " << std::hex << got;
  } else {
    EXPECT_EQ(got, want) << std::hex << "float 0x" << bits_of(f) << " (" << f << "): got 0x" << got << ", want 0x"
                         << want;
  }
}

TEST(BF16, DecodesAllBitPatterns) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float got = to_float(bf16{std::uint16_t(b)});
    const double want = ref_bf16_decode(std::uint16_t(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << b;
    } else {
      ASSERT_EQ(double(got), want) << std::hex << "bf16 bits 0x" << b;
      ASSERT_EQ(std::signbit(got), bool(b & 0x8000)) << std::hex << b;
    }
  }
}

TEST(BF16, EncodesEdgeCases) {
  for (float f : edge_floats()) expect_bf16_encoding(f);
  EXPECT_EQ(to_bf16(1.f).bits, 0x3f80);
  EXPECT_EQ(to_bf16(from_bits(0x3f808000u)).bits, 0x3f80);  // tie, even stays
  EXPECT_EQ(to_bf16(from_bits(0x3f818000u)).bits, 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(to_bf16(from_bits(0x7f7f8000u)).bits, 0x7f80);  // overflow tie -> inf
  EXPECT_EQ(to_bf16(from_bits(0x7f7f7fffu)).bits, 0x7f7f);
  EXPECT_EQ(to_bf16(-0.f).bits, 0x8000);
}

TEST(BF16, EncodesRandomFloats) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_int_distribution<std::uint32_t> low16(0, 0xffff);
  int mismatches = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    std::uint32_t u = any(rng);
    // Every fourth draw sits on or next to a tie (low half 0x8000 +- 1).
    if (i % 4 == 1) u = (u & 0xffff0000u) | (0x7fffu + (low16(rng) % 3));
    const float f = from_bits(u);
    const std::uint16_t got = to_bf16(f).bits, want = ref_bf16_encode(f);
    const bool ok = std::isnan(f) ? std::isnan(to_float(bf16{got})) : got == want;
    if (!ok && ++mismatches <= 10)
      ADD_FAILURE() << std::hex << "float 0x" << u << ": got 0x" << got << ", want 0x" << want;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(BF16, RoundTripsEveryFiniteValue) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = to_float(bf16{std::uint16_t(b)});
    if (std::isnan(f)) continue;
    ASSERT_EQ(to_bf16(f).bits, b) << std::hex << b;
  }
}

TEST(BF16, NanStaysNanEvenWhenRoundingWouldCarry) {
  // 0x7fffffff: adding the rounding bias would carry into the sign bit.
  for (std::uint32_t u : {0x7fffffffu, 0xffffffffu, 0x7f800001u, 0x7fff8000u, 0xff800001u}) {
    const bf16 h = to_bf16(from_bits(u));
    EXPECT_TRUE(std::isnan(to_float(h))) << std::hex << u;
    EXPECT_EQ(h.bits & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u;
  }
}

}  // namespace
}  // namespace ht
