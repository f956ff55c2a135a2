// The emulated device's warp matrix operations (nvcuda::wmma), 16x16x16
// tiles of f16/bf16 with f32 accumulation. Every lane holds the whole tile
// and computes the whole product in f32, summing over k in order: the values
// of a tensor core's product, not its rounding (which the hardware does not
// specify). Each call is warp-collective, as on the device: all 32 lanes
// must make it, or the emulator names the one that did not.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline void converge() { __syncwarp(0xffffffffu); }
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[rows * cols];  // row-major, whatever the memory layout
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T v) {
  for (T& e : f.x) e = v;
}

/// matrix_a / matrix_b, with the layout of the fragment type.
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  detail::converge();
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int i = 0; i < F::rows; ++i)
    for (int j = 0; j < F::cols; ++j)
      f.x[i * F::cols + j] = std::is_same_v<Layout, col_major> ? p[j * ldm + i] : p[i * ldm + j];
}

/// The accumulator, with the layout given.
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout) {
  detail::converge();
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) f.x[i * N + j] = layout == mem_col_major ? p[j * ldm + i] : p[i * ldm + j];
}

/// Each lane writes its share of the tile (element e by lane e % 32), as
/// the device's lanes each write theirs.
template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  detail::converge();
  const int lane = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
  for (int e = lane; e < M * N; e += 32) {
    const int i = e / N, j = e % N;
    (layout == mem_col_major ? p[j * ldm + i] : p[i * ldm + j]) = f.x[e];
  }
}

template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c) {
  detail::converge();
  TC out[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int l = 0; l < K; ++l) sum += detail::to_float(a.x[i * K + l]) * detail::to_float(b.x[l * N + j]);
      out[i * N + j] = sum;
    }
  for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma
