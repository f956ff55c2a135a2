// Host casts, unscale-with-finite-check and sum of squares, over the shared
// load/store bodies in kernels/cast.cuh. The f32 <-> f16 casts use the F16C
// conversion instructions where the CPU has them (see f16_to_f32_f16c).
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "cast.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/convert.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace {

/// Calls fn(typed_pointer) with x's data as float*, f16* or bf16*.
template <typename Fn>
void visit_float(const Tensor& x, Fn&& fn) {
  switch (x.dtype()) {
    case DType::kF32: fn(static_cast<float*>(x.data_ptr())); break;
    case DType::kF16: fn(static_cast<f16*>(x.data_ptr())); break;
    case DType::kBF16: fn(static_cast<bf16*>(x.data_ptr())); break;
    case DType::kI32: break;  // rejected by the public op
  }
}

// Converters of n consecutive elements, one per (source, destination) pair.
using Convert = void (*)(const void* src, void* dst, std::int64_t n);

template <typename S, typename D>
void convert_scalar(const void* src, void* dst, std::int64_t n) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  for (std::int64_t i = 0; i < n; ++i) kern::store(d, i, kern::load(s, i));
}

void copy_f32(const void* src, void* dst, std::int64_t n) { std::memmove(dst, src, std::size_t(n) * sizeof(float)); }

// bf16 is the top half of an f32: widening is a shift, narrowing an integer
// add that rounds to nearest even (kern::store, ht/core/half.h). Both loops
// vectorise as written; the AVX2 clones convert 8 elements per instruction.
HT_CPU_MULTIVERSION void bf16_to_f32(const void* src, void* dst, std::int64_t n) {
  const bf16* s = static_cast<const bf16*>(src);
  float* d = static_cast<float*>(dst);
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) d[i] = to_float(s[i]);
}

HT_CPU_MULTIVERSION void f32_to_bf16(const void* src, void* dst, std::int64_t n) {
  const float* s = static_cast<const float*>(src);
  bf16* d = static_cast<bf16*>(dst);
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) d[i] = to_bf16(s[i]);
}

// f16 <-> f32 with F16C: vcvtph2ps widens exactly, vcvtps2ph with immediate
// rounding mode 0 rounds to nearest even with f16 subnormals and overflow to
// Inf, as to_f16 does (tests/ops/cast_test.cc compares the two bit for bit
// over every f16 and a sweep of f32 patterns; NaN payloads may differ, NaN
// stays NaN). The software to_f16 is a dozen integer operations with a branch
// per element, which GCC leaves scalar. These functions are compiled for
// F16C (and the AVX it implies) and called only when the CPU reports both:
// the library itself targets baseline x86-64.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const void* src, void* dst, std::int64_t n) {
  const f16* s = static_cast<const f16*>(src);
  float* d = static_cast<float*>(dst);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = to_float(s[i]);
}

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const void* src, void* dst, std::int64_t n) {
  const float* s = static_cast<const float*>(src);
  f16* d = static_cast<f16*>(dst);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = to_f16(s[i]);
}

// F16C from CPUID leaf 1 (ECX bit 29): clang does not take "f16c" in __builtin_cpu_supports.
bool cpu_has_f16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return has;
}

Convert f16_to_f32() { return cpu_has_f16c() ? f16_to_f32_f16c : convert_scalar<f16, float>; }
Convert f32_to_f16() { return cpu_has_f16c() ? f32_to_f16_f16c : convert_scalar<float, f16>; }
#else
Convert f16_to_f32() { return convert_scalar<f16, float>; }
Convert f32_to_f16() { return convert_scalar<float, f16>; }
#endif

Convert converter(DType from, DType to) {
  if (from == DType::kF32 && to == DType::kF32) return copy_f32;
  if (from == DType::kF32 && to == DType::kF16) return f32_to_f16();
  if (from == DType::kF32 && to == DType::kBF16) return f32_to_bf16;
  if (from == DType::kF16 && to == DType::kF32) return f16_to_f32();
  if (from == DType::kBF16 && to == DType::kF32) return bf16_to_f32;
  // 16-bit to 16-bit: rare, through float one element at a time.
  if (from == DType::kF16 && to == DType::kF16) return convert_scalar<f16, f16>;
  if (from == DType::kF16 && to == DType::kBF16) return convert_scalar<f16, bf16>;
  if (from == DType::kBF16 && to == DType::kF16) return convert_scalar<bf16, f16>;
  if (from == DType::kBF16 && to == DType::kBF16) return convert_scalar<bf16, bf16>;
  return nullptr;  // i32: rejected by the public op
}

}  // namespace

void widen(DType dtype, const void* src, float* dst, std::int64_t n) { converter(dtype, DType::kF32)(src, dst, n); }

void narrow(const float* src, DType dtype, void* dst, std::int64_t n) { converter(DType::kF32, dtype)(src, dst, n); }

void cast(const Tensor& src, Tensor& dst) {
  const Convert convert = converter(src.dtype(), dst.dtype());
  if (!convert) return;
  // Blocks of 16K elements (64 KiB of f32) per task; a tensor of one block (a
  // bias, a norm gain: the 16-bit ops stage many) stays on the calling thread,
  // as a parallel region per small tensor costs a barrier each.
  constexpr std::int64_t kBlock = 1 << 14;
  const std::int64_t n = src.numel(), blocks = (n + kBlock - 1) / kBlock;
  const auto* s = static_cast<const unsigned char*>(src.data_ptr());
  auto* d = static_cast<unsigned char*>(dst.data_ptr());
  const std::int64_t s_size = std::int64_t(dtype_size(src.dtype())), d_size = std::int64_t(dtype_size(dst.dtype()));
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kBlock;
    convert(s + begin * s_size, d + begin * d_size, std::min(kBlock, n - begin));
  }
}

void scale_and_check_finite(Tensor& x, float scale, Tensor& found) {
  const std::int64_t n = x.numel();
  bool all_finite = true;
  visit_float(x, [&](auto* p) {
#pragma omp parallel for schedule(static) reduction(&& : all_finite)
    for (std::int64_t i = 0; i < n; ++i) all_finite = kern::scale_check(p, i, scale) && all_finite;
  });
  if (!all_finite) *found.data<float>() = 1.f;
}

void sum_squares(const Tensor& x, Tensor& acc) {
  // Fixed-size chunks summed in double, then added in chunk order: the same
  // bits whatever the thread count. A tensor of one chunk (a bias, a norm
  // gain) stays on the calling thread: a parallel region per small tensor is
  // a barrier per small tensor, which costs most when the cores are shared.
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(std::size_t(chunks), 0.0);
  visit_float(x, [&](const auto* p) {
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      // Eight running sums, element i into sum i % 8, added in a fixed order
      // at the end: independent chains, so the loop runs at the adder's
      // throughput instead of its latency (the 124M model's gradient norm
      // took 6% of a step with one chain), and still the same bits every run.
      constexpr int kLanes = 8;
      double lane[kLanes] = {};
      const std::int64_t begin = ch * kChunk, end = std::min(n, (ch + 1) * kChunk);
      std::int64_t i = begin;
      for (; i + kLanes <= end; i += kLanes)
        for (int k = 0; k < kLanes; ++k) {
          const double v = kern::load(p, i + k);
          lane[k] += v * v;
        }
      for (int k = 0; i < end; ++i, ++k) {
        const double v = kern::load(p, i);
        lane[k] += v * v;
      }
      double s = 0.0;
      for (int k = 0; k < kLanes; ++k) s += lane[k];
      partial[std::size_t(ch)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  *acc.data<float>() += float(total);
}

}  // namespace ht::ops::cpu
