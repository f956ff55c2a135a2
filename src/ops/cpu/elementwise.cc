// Host element-wise ops: OpenMP loops over the shared bodies in kernels/,
// except GELU (see gelu_forward). add, scale and GELU also take f16 and bf16
// tensors directly (see map_half); bias_add and bias_grad get f32 copies from
// the public op (src/ops/f32_staging.h).
#include <algorithm>
#include <array>

#include "gelu.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/column_blocks.h"
#include "ops/cpu/convert.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace {

// f16 and bf16 element-wise ops run block by block: each thread widens a
// block of every input into f32 buffers on its stack, runs the f32 body on
// them and rounds the output block once into the 16-bit tensor. Nothing of
// a tensor's size is allocated. F32 copies of whole tensors (the public
// ops' staging) made the 16-bit GELU 3.2x slower than f32 on one core, most
// of it page faults of the fresh 6 MB buffers that glibc returns to the
// system after every call; by blocks it is 1.3x (docs/design.md).
constexpr std::int64_t kHalfBlock = 2048;  // 8 KiB of f32 per buffer: the buffers of one block stay in L1

using HalfBody = void (*)(const float* const* in, float* out, std::int64_t n, float arg);

/// out = body(in...) element-wise; every tensor is f16 or bf16 (all the same)
/// with out's element count. out may be one of the inputs: each block reads
/// all its inputs before it writes.
template <std::size_t N>
void map_half(const std::array<const Tensor*, N>& in, Tensor& out, HalfBody body, float arg = 0.f) {
  const DType dt = out.dtype();
  const std::int64_t n = out.numel(), blocks = (n + kHalfBlock - 1) / kHalfBlock;
  const std::int64_t bytes = std::int64_t(dtype_size(dt));
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    float buf[N + 1][kHalfBlock];
    const float* ins[N];
    const std::int64_t begin = b * kHalfBlock, len = std::min(kHalfBlock, n - begin);
    for (std::size_t k = 0; k < N; ++k) {
      widen(dt, static_cast<const char*>(in[k]->data_ptr()) + begin * bytes, buf[k], len);
      ins[k] = buf[k];
    }
    body(ins, buf[N], len, arg);
    narrow(buf[N], dt, static_cast<char*>(out.data_ptr()) + begin * bytes, len);
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.dtype() != DType::kF32) {
    map_half<2>({&a, &b}, out, [](const float* const* in, float* o, std::int64_t n, float) {
#pragma omp simd
      for (std::int64_t i = 0; i < n; ++i) o[i] = in[0][i] + in[1][i];
    });
    return;
  }
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void scale(Tensor& x, float s) {
  if (x.dtype() != DType::kF32) {
    map_half<1>({&x}, x, [](const float* const* in, float* o, std::int64_t n, float f) {
#pragma omp simd
      for (std::int64_t i = 0; i < n; ++i) o[i] = in[0][i] * f;
    }, s);
    return;
  }
  float* p = x.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) p[i] *= s;
}

void bias_add(Tensor& y, const Tensor& bias) {
  const std::int64_t c = bias.numel(), rows = c ? y.numel() / c : 0;
  float* py = y.data<float>();
  const float* pb = bias.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = py + r * c;
#pragma omp simd
    for (std::int64_t j = 0; j < c; ++j) row[j] += pb[j];
  }
}

void bias_fill(Tensor& y, const Tensor& bias) {
  const std::int64_t c = bias.numel(), rows = c ? y.numel() / c : 0;
  float* py = y.data<float>();
  const float* pb = bias.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) std::copy(pb, pb + c, py + r * c);
}

namespace {

// acc (c) += row (c).
HT_CPU_MULTIVERSION void add_row(const float* row, float* acc, std::int64_t c) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) acc[j] += row[j];
}

}  // namespace

void bias_grad(const Tensor& dy, Tensor& dbias) {
  const std::int64_t c = dbias.numel(), rows = c ? dy.numel() / c : 0;
  const float* pdy = dy.data<float>();
  float* out[] = {dbias.data<float>()};
  column_sums_by_row_chunks(rows, c, 1, out, [&](std::int64_t r, float* acc) { add_row(pdy + r * c, acc, c); });
}

// GELU is kern::gelu's function rearranged so that the loop vectorises:
// 0.5 (1 + tanh(u)) is sigmoid(2u), and 1 - tanh(u)^2 is 4 s (1 - s) for
// s = sigmoid(2u), computed with vexp instead of a scalar tanhf call (which
// took about a third of a small-GPT training step on one core). The two agree
// to a few ulp.
// Threads take blocks of kGeluBlock elements; each block is a vector loop in a
// function compiled for AVX2 and for the baseline (HT_CPU_MULTIVERSION).
namespace {

constexpr std::int64_t kGeluBlock = 1 << 14;

inline float gelu_sigmoid(float x) {
  return vsigmoid(2.f * kern::kGeluScale * (x + kern::kGeluCubic * x * x * x));
}

HT_CPU_MULTIVERSION void gelu_forward_block(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * gelu_sigmoid(x[i]);
}

HT_CPU_MULTIVERSION void gelu_backward_block(const float* x, const float* dy, float* dx, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float s = gelu_sigmoid(v);
    const float dinner = kern::kGeluScale * (1.f + 3.f * kern::kGeluCubic * v * v);
    dx[i] = dy[i] * (s + 2.f * v * s * (1.f - s) * dinner);
  }
}

}  // namespace

void gelu_forward(const Tensor& x, Tensor& y) {
  if (y.dtype() != DType::kF32) {
    map_half<1>({&x}, y, [](const float* const* in, float* o, std::int64_t n, float) {
      gelu_forward_block(in[0], o, n);
    });
    return;
  }
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const std::int64_t n = x.numel(), blocks = (n + kGeluBlock - 1) / kGeluBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kGeluBlock;
    gelu_forward_block(px + begin, py + begin, std::min(kGeluBlock, n - begin));
  }
}

// GELU's backward with the bias gradient: each row of dx is summed into the
// chunk's partial bias gradient while it is still in L1 (see bias_grad). In
// the small GPT's MLP (1024 x 1536) that saves a pass over 6 MB.
void gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dbias) {
  const std::int64_t c = dbias.numel(), rows = c ? x.numel() / c : 0;
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  float* out[] = {dbias.data<float>()};
  column_sums_by_row_chunks(rows, c, 1, out, [&](std::int64_t r, float* acc) {
    gelu_backward_block(px + r * c, pdy + r * c, pdx + r * c, c);
    add_row(pdx + r * c, acc, c);
  });
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  if (dx.dtype() != DType::kF32) {
    map_half<2>({&x, &dy}, dx, [](const float* const* in, float* o, std::int64_t n, float) {
      gelu_backward_block(in[0], in[1], o, n);
    });
    return;
  }
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  const std::int64_t n = x.numel(), blocks = (n + kGeluBlock - 1) / kGeluBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kGeluBlock;
    gelu_backward_block(px + begin, pdy + begin, pdx + begin, std::min(kGeluBlock, n - begin));
  }
}

}  // namespace ht::ops::cpu
