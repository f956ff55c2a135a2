// CUDA flash attention, forward and backward, for both public forms (packed
// causal, and general with grouped-query heads, an optional causal mask and
// key padding mask), either with optional segment ids (document masking):
// the tiled online softmax of ht/ops/attention.h, one
// thread block per tile, f32 on CUDA cores and f16/bf16 inputs on tensor
// cores (WMMA 16x16x16, f32 accumulation).
//
// NOTE: this code has never run on a GPU; it runs on the emulated device
// (docs/emulation.md), where tests/ops/ops_cuda_test.cc compares it with the
// CPU driver (src/ops/cpu/attention.cc), which implements the same algorithm.
//
// Kept simple rather than fast: square tiles of kTile query rows and keys in
// shared memory, the head dimension D padded with zeros to Dp, a multiple of
// 16 (the WMMA fragment side); every tile product is one block-wide GEMM
// helper; the per-row softmax work is one thread per row. Backward runs two
// kernels that each recompute P from lse: one block per (key tile, key/value
// head) accumulates dK and dV over its query heads and their query tiles in
// order, one block per (query tile, query head) accumulates dQ over its key
// tiles in order. Neither uses atomics, so results are deterministic. With
// segment ids, a tile pair whose query rows and keys hold disjoint ranges of
// ids is skipped by the whole block (every thread computes the same ranges,
// so the barriers stay matched); the others mask per element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <climits>
#include <type_traits>

#include "cuda_launch.cuh"
#include "launch.h"
#include "softmax.cuh"

namespace ht::cuda {
namespace {

constexpr int kTile = 32;      // query rows and keys per tile
constexpr int kThreads = 128;  // four warps per block
constexpr int kFrag = 16;      // WMMA fragment side

// bf16 fragments need sm_80; older targets take the scalar path for bf16.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kBf16TensorCores = false;
#else
constexpr bool kBf16TensorCores = true;
#endif

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename S>
__device__ __forceinline__ S from_f(float x) {
  if constexpr (std::is_same_v<S, __half>) return __float2half_rn(x);
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return x;
}

template <typename S>
constexpr bool uses_tensor_cores() {
  if constexpr (std::is_same_v<S, __half>) return true;
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return kBf16TensorCores;
  else return false;
}

// C (m x n, f32, row-major, ldc) = (accumulate ? C : 0) + A B over shared
// memory, with A(i, l) = a[i * lda + l] (a[l * lda + i] when kTransA) and
// B(l, j) = b[l * ldb + j] (b[j * ldb + l] when kTransB). m, n, k are
// multiples of 16. Called by every thread of the block; the caller
// synchronises before (inputs written) and after (C read).
template <typename S, bool kTransA, bool kTransB>
__device__ void block_gemm(int m, int n, int k, const S* a, int lda, const S* b, int ldb, float* c, int ldc,
                           bool accumulate) {
  if constexpr (uses_tensor_cores<S>()) {
    using namespace nvcuda;
    using LayoutA = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;
    const int warp = int(threadIdx.x) / kWarp, warps = int(blockDim.x) / kWarp;
    const int frags_n = n / kFrag;
    for (int f = warp; f < (m / kFrag) * frags_n; f += warps) {
      const int i0 = (f / frags_n) * kFrag, j0 = (f % frags_n) * kFrag;
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc;
      if (accumulate) wmma::load_matrix_sync(acc, c + i0 * ldc + j0, unsigned(ldc), wmma::mem_row_major);
      else wmma::fill_fragment(acc, 0.f);
      for (int l = 0; l < k; l += kFrag) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, S, LayoutA> fa;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, S, LayoutB> fb;
        wmma::load_matrix_sync(fa, kTransA ? a + l * lda + i0 : a + i0 * lda + l, unsigned(lda));
        wmma::load_matrix_sync(fb, kTransB ? b + j0 * ldb + l : b + l * ldb + j0, unsigned(ldb));
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(c + i0 * ldc + j0, acc, unsigned(ldc), wmma::mem_row_major);
    }
  } else {
    for (int e = int(threadIdx.x); e < m * n; e += int(blockDim.x)) {
      const int i = e / n, j = e % n;
      float sum = accumulate ? c[i * ldc + j] : 0.f;
      for (int l = 0; l < k; ++l)
        sum += to_f(kTransA ? a[l * lda + i] : a[i * lda + l]) * to_f(kTransB ? b[j * ldb + l] : b[l * ldb + j]);
      c[i * ldc + j] = sum;
    }
  }
}

// Rows [row0, row0 + kTile) and columns [0, d) of a strided matrix (row r at
// src + r * ld) into a kTile x dp shared tile; rows past t and columns past d
// are zeros, so they add nothing to any product.
template <typename S>
__device__ void load_tile(S* dst, const S* src, std::int64_t ld, std::int64_t row0, std::int64_t t, int d, int dp) {
  for (int e = int(threadIdx.x); e < kTile * dp; e += int(blockDim.x)) {
    const int i = e / dp, c = e % dp;
    dst[e] = row0 + i < t && c < d ? src[(row0 + i) * ld + c] : from_f<S>(0.f);
  }
}

// Whether query row i may see key j (both absolute positions) of tk keys;
// causal: j <= i + offset; keep: the batch entry's key mask; ids: its
// segment ids, q_id query i's (read only when ids is not null).
__device__ __forceinline__ bool visible(std::int64_t i, std::int64_t j, std::int64_t tk, bool causal,
                                        std::int64_t offset, const std::int32_t* keep, const std::int32_t* ids,
                                        std::int32_t q_id) {
  return j < tk && (!causal || j <= i + offset) && (!keep || keep[j] != 0) && (!ids || ids[j] == q_id);
}

// The smallest and largest segment id of positions [p0, p0 + kTile) below
// t, read from global memory by every thread alike (kTile reads, cached):
// each thread of a block gets the same range, so a tile skipped on it is
// skipped by all and the barriers stay matched.
struct IdRange {
  std::int32_t lo = INT_MAX, hi = INT_MIN;
};
__device__ IdRange id_range(const std::int32_t* ids, std::int64_t p0, std::int64_t t) {
  IdRange r;
  for (std::int64_t p = p0; p < p0 + kTile && p < t; ++p) {
    const std::int32_t id = ids[p];
    r.lo = id < r.lo ? id : r.lo;
    r.hi = id > r.hi ? id : r.hi;
  }
  return r;
}
// Whether no query of one range can see a key of the other.
__device__ __forceinline__ bool apart(IdRange a, IdRange b) { return a.hi < b.lo || b.hi < a.lo; }

// Shared-memory carving: consecutive regions, each a multiple of 32 bytes
// (Dp and kTile are multiples of 16 elements), so every WMMA pointer keeps
// the 256-bit alignment it needs.
struct Carver {
  unsigned char* p;
  template <typename U>
  __device__ U* take(int count) {
    U* r = reinterpret_cast<U*>(p);
    p += ((std::size_t(count) * sizeof(U) + 31) / 32) * 32;
    return r;
  }
};

__host__ __device__ int padded_dim(std::int64_t d) { return int((d + kFrag - 1) / kFrag * kFrag); }

std::size_t forward_smem_bytes(std::size_t es, int dp) {
  return 3 * kTile * dp * es + kTile * kTile * es + kTile * kTile * 4 + kTile * dp * 4 + 3 * kTile * 4 + 6 * 32;
}
std::size_t backward_smem_bytes(std::size_t es, int dp) {
  return 4 * kTile * dp * es + 2 * kTile * kTile * es + 2 * kTile * kTile * 4 + 2 * kTile * dp * 4 + 2 * kTile * 4 +
         12 * 32;
}

// Forward: block (query tile, query head h, batch entry b). acc holds the
// unnormalised output of the tile's rows; per row m (running max of the
// scaled scores), l (running sum of exp(s - m)), alpha (this key tile's
// rescale factor).
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(AttentionArgs a, S* out, float* lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int d = int(a.head_dim), dp = padded_dim(a.head_dim);
  const std::int64_t t = a.t, b = blockIdx.z, h = blockIdx.y, g = h / (a.n_head / a.n_kv_head);
  const std::int64_t r0 = std::int64_t(blockIdx.x) * kTile;
  const float scale = 1.f / sqrtf(float(d));
  Carver cv{smem};
  S* qs = cv.take<S>(kTile * dp);
  S* ks = cv.take<S>(kTile * dp);
  S* vs = cv.take<S>(kTile * dp);
  S* ps = cv.take<S>(kTile * kTile);
  float* sc = cv.take<float>(kTile * kTile);
  float* acc = cv.take<float>(kTile * dp);
  float* m = cv.take<float>(kTile);
  float* l = cv.take<float>(kTile);
  float* alpha = cv.take<float>(kTile);
  const std::int64_t tk = a.tk;
  const S* q = static_cast<const S*>(a.q) + b * t * a.ld_q + h * d;
  const S* k = static_cast<const S*>(a.k) + b * tk * a.ld_k + g * d;
  const S* v = static_cast<const S*>(a.v) + b * tk * a.ld_v + g * d;
  const std::int32_t* keep = a.key_mask ? a.key_mask + b * tk : nullptr;
  const std::int32_t* ids = a.segment_ids ? a.segment_ids + b * t : nullptr;  // t == tk with ids
  const IdRange q_ids = ids ? id_range(ids, r0, t) : IdRange{};

  load_tile(qs, q, a.ld_q, r0, t, d, dp);
  for (int e = int(threadIdx.x); e < kTile * dp; e += int(blockDim.x)) acc[e] = 0.f;
  if (threadIdx.x < kTile) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0.f;
  }
  // Causal: later key tiles are all masked.
  const std::int64_t key_end = a.causal ? std::min(tk, r0 + kTile + a.causal_offset) : tk;
  for (std::int64_t c0 = 0; c0 < key_end; c0 += kTile) {
    if (ids && apart(q_ids, id_range(ids, c0, tk))) continue;  // the whole block alike
    load_tile(ks, k, a.ld_k, c0, tk, d, dp);
    load_tile(vs, v, a.ld_v, c0, tk, d, dp);
    __syncthreads();
    block_gemm<S, false, true>(kTile, kTile, dp, qs, dp, ks, dp, sc, kTile, false);  // S = Q K^T
    __syncthreads();
    if (threadIdx.x < kTile) {
      const int r = int(threadIdx.x);
      const std::int64_t i = r0 + r;
      const std::int32_t q_id = ids && i < t ? ids[i] : 0;
      float* row = sc + r * kTile;
      float mx = -INFINITY;
      for (int j = 0; j < kTile; ++j) {
        const float s =
            visible(i, c0 + j, tk, a.causal, a.causal_offset, keep, ids, q_id) ? row[j] * scale : -INFINITY;
        row[j] = s;
        mx = fmaxf(mx, s);
      }
      const float m_old = m[r], m_new = fmaxf(m_old, mx);
      float f = 1.f, sum = 0.f;
      if (m_new == -INFINITY) {  // no admissible key yet
        for (int j = 0; j < kTile; ++j) ps[r * kTile + j] = from_f<S>(0.f);
      } else {
        f = m_old == m_new ? 1.f : expf(m_old - m_new);
        for (int j = 0; j < kTile; ++j) {
          const S p = from_f<S>(expf(row[j] - m_new));  // a masked key: expf(-inf) = 0
          ps[r * kTile + j] = p;
          sum += to_f(p);  // the sum of what P V adds, rounding included
        }
        m[r] = m_new;
      }
      l[r] = l[r] * f + sum;
      alpha[r] = f;
    }
    __syncthreads();
    for (int e = int(threadIdx.x); e < kTile * dp; e += int(blockDim.x)) acc[e] *= alpha[e / dp];
    __syncthreads();
    block_gemm<S, false, false>(kTile, dp, kTile, ps, kTile, vs, dp, acc, dp, true);  // acc += P V
    __syncthreads();
  }
  // With no key tile at all (no keys, or every tile skipped) the loop's
  // barriers never ran: the rows' m, l and acc were set by other threads.
  __syncthreads();
  const std::int64_t ld_out = a.n_head * a.head_dim;
  for (int e = int(threadIdx.x); e < kTile * d; e += int(blockDim.x)) {
    const int r = e / d, c = e % d;
    if (r0 + r < t) {
      const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;  // a row without keys: zeros
      out[(b * t + r0 + r) * ld_out + h * d + c] = from_f<S>(acc[r * dp + c] * inv);
    }
  }
  if (threadIdx.x < kTile && r0 + threadIdx.x < t)
    lse[(b * a.n_head + h) * t + r0 + threadIdx.x] = kern::attention_lse(m[threadIdx.x], l[threadIdx.x]);
}

// The query-tile inputs of backward: Q and dO tiles, and per row lse and D =
// sum_c dO O (f32, from the stored values).
template <typename S>
__device__ void load_query_side(const AttentionArgs& a, const AttentionGrads& gr, std::int64_t b, std::int64_t h,
                                std::int64_t r0, int dp, S* qs, S* dos, float* lse_rows, float* d_rows) {
  const int d = int(a.head_dim);
  const std::int64_t t = a.t, ld_out = a.n_head * a.head_dim;
  load_tile(qs, static_cast<const S*>(a.q) + b * t * a.ld_q + h * d, a.ld_q, r0, t, d, dp);
  const S* dout = static_cast<const S*>(gr.dout) + b * t * ld_out + h * d;
  const S* out = static_cast<const S*>(gr.out) + b * t * ld_out + h * d;
  load_tile(dos, dout, ld_out, r0, t, d, dp);
  if (threadIdx.x < kTile) {
    const std::int64_t i = r0 + threadIdx.x;
    float dot = 0.f;
    if (i < t)
      for (int c = 0; c < d; ++c) dot += to_f(dout[i * ld_out + c]) * to_f(out[i * ld_out + c]);
    d_rows[threadIdx.x] = dot;
    lse_rows[threadIdx.x] = i < t ? gr.lse[(b * a.n_head + h) * t + i] : -INFINITY;
  }
}

// After sc = Q K^T and dp = dO V^T of one tile: P = exp(s scale - lse) on
// visible entries (0 elsewhere, and on rows with lse = -inf), into ps; dS = P
// (dP - D) scale into dss. One thread per row.
// keep and ids: the batch entry's key mask and segment ids, or null.
template <typename S>
__device__ void tile_softmax_grad(const AttentionArgs& a, std::int64_t r0, std::int64_t c0, const std::int32_t* keep,
                                  const std::int32_t* ids, const float* sc, const float* dp, const float* lse_rows,
                                  const float* d_rows, S* ps, S* dss, float scale) {
  if (threadIdx.x >= kTile) return;
  const int r = int(threadIdx.x);
  const float row_lse = lse_rows[r];
  const std::int32_t q_id = ids && r0 + r < a.t ? ids[r0 + r] : 0;
  for (int j = 0; j < kTile; ++j) {
    const bool on =
        row_lse != -INFINITY && visible(r0 + r, c0 + j, a.tk, a.causal, a.causal_offset, keep, ids, q_id);
    const float p = on ? expf(sc[r * kTile + j] * scale - row_lse) : 0.f;
    ps[r * kTile + j] = from_f<S>(p);
    dss[r * kTile + j] = from_f<S>(kern::softmax_grad(p, dp[r * kTile + j], d_rows[r]) * scale);
  }
}

// dK and dV: block (key tile, key/value head g, batch entry b), summing over
// the group's query heads in order and their query tiles in order.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kv_kernel(AttentionArgs a, AttentionGrads gr) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int d = int(a.head_dim), dp = padded_dim(a.head_dim);
  const std::int64_t t = a.t, b = blockIdx.z, g = blockIdx.y, group = a.n_head / a.n_kv_head;
  const std::int64_t c0 = std::int64_t(blockIdx.x) * kTile;
  const float scale = 1.f / sqrtf(float(d));
  Carver cv{smem};
  S* ks = cv.take<S>(kTile * dp);
  S* vs = cv.take<S>(kTile * dp);
  S* qs = cv.take<S>(kTile * dp);
  S* dos = cv.take<S>(kTile * dp);
  S* ps = cv.take<S>(kTile * kTile);
  S* dss = cv.take<S>(kTile * kTile);
  float* sc = cv.take<float>(kTile * kTile);
  float* dpm = cv.take<float>(kTile * kTile);
  float* dk = cv.take<float>(kTile * dp);
  float* dv = cv.take<float>(kTile * dp);
  float* lse_rows = cv.take<float>(kTile);
  float* d_rows = cv.take<float>(kTile);
  const std::int64_t tk = a.tk;
  const std::int32_t* keep = a.key_mask ? a.key_mask + b * tk : nullptr;
  const std::int32_t* ids = a.segment_ids ? a.segment_ids + b * t : nullptr;  // t == tk with ids
  const IdRange k_ids = ids ? id_range(ids, c0, tk) : IdRange{};
  load_tile(ks, static_cast<const S*>(a.k) + b * tk * a.ld_k + g * d, a.ld_k, c0, tk, d, dp);
  load_tile(vs, static_cast<const S*>(a.v) + b * tk * a.ld_v + g * d, a.ld_v, c0, tk, d, dp);
  for (int e = int(threadIdx.x); e < kTile * dp; e += int(blockDim.x)) dk[e] = dv[e] = 0.f;
  // Causal: query rows before c0 - offset see none of this tile's keys; the
  // first query tile to walk is the one holding that row.
  const std::int64_t first_row = a.causal ? std::max<std::int64_t>(0, c0 - a.causal_offset) : 0;
  const std::int64_t first_r0 = first_row / kTile * kTile;
  for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (std::int64_t r0 = first_r0; r0 < t; r0 += kTile) {
      if (ids && apart(id_range(ids, r0, t), k_ids)) continue;  // the whole block alike
      __syncthreads();  // the previous tile's products are done with qs, dos, ps, dss
      load_query_side(a, gr, b, h, r0, dp, qs, dos, lse_rows, d_rows);
      __syncthreads();
      block_gemm<S, false, true>(kTile, kTile, dp, qs, dp, ks, dp, sc, kTile, false);    // S = Q K^T
      block_gemm<S, false, true>(kTile, kTile, dp, dos, dp, vs, dp, dpm, kTile, false);  // dP = dO V^T
      __syncthreads();
      tile_softmax_grad(a, r0, c0, keep, ids, sc, dpm, lse_rows, d_rows, ps, dss, scale);
      __syncthreads();
      block_gemm<S, true, false>(kTile, dp, kTile, ps, kTile, dos, dp, dv, dp, true);  // dV += P^T dO
      block_gemm<S, true, false>(kTile, dp, kTile, dss, kTile, qs, dp, dk, dp, true);  // dK += dS^T Q
    }
  }
  __syncthreads();
  S* dk_out = static_cast<S*>(gr.dk) + b * tk * gr.ld_dk + g * d;
  S* dv_out = static_cast<S*>(gr.dv) + b * tk * gr.ld_dv + g * d;
  for (int e = int(threadIdx.x); e < kTile * d; e += int(blockDim.x)) {
    const int r = e / d, c = e % d;
    if (c0 + r < tk) {
      dk_out[(c0 + r) * gr.ld_dk + c] = from_f<S>(dk[r * dp + c]);
      dv_out[(c0 + r) * gr.ld_dv + c] = from_f<S>(dv[r * dp + c]);
    }
  }
}

// dQ: block (query tile, query head h, batch entry b), summing over its key
// tiles in order.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_kernel(AttentionArgs a, AttentionGrads gr) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int d = int(a.head_dim), dp = padded_dim(a.head_dim);
  const std::int64_t t = a.t, b = blockIdx.z, h = blockIdx.y, g = h / (a.n_head / a.n_kv_head);
  const std::int64_t r0 = std::int64_t(blockIdx.x) * kTile;
  const float scale = 1.f / sqrtf(float(d));
  Carver cv{smem};
  S* ks = cv.take<S>(kTile * dp);
  S* vs = cv.take<S>(kTile * dp);
  S* qs = cv.take<S>(kTile * dp);
  S* dos = cv.take<S>(kTile * dp);
  S* ps = cv.take<S>(kTile * kTile);
  S* dss = cv.take<S>(kTile * kTile);
  float* sc = cv.take<float>(kTile * kTile);
  float* dpm = cv.take<float>(kTile * kTile);
  float* dq = cv.take<float>(kTile * dp);
  float* lse_rows = cv.take<float>(kTile);
  float* d_rows = cv.take<float>(kTile);
  const std::int64_t tk = a.tk;
  const std::int32_t* keep = a.key_mask ? a.key_mask + b * tk : nullptr;
  const std::int32_t* ids = a.segment_ids ? a.segment_ids + b * t : nullptr;  // t == tk with ids
  const IdRange q_ids = ids ? id_range(ids, r0, t) : IdRange{};
  const S* k = static_cast<const S*>(a.k) + b * tk * a.ld_k + g * d;
  const S* v = static_cast<const S*>(a.v) + b * tk * a.ld_v + g * d;
  load_query_side(a, gr, b, h, r0, dp, qs, dos, lse_rows, d_rows);
  for (int e = int(threadIdx.x); e < kTile * dp; e += int(blockDim.x)) dq[e] = 0.f;
  const std::int64_t key_end = a.causal ? std::min(tk, r0 + kTile + a.causal_offset) : tk;
  for (std::int64_t c0 = 0; c0 < key_end; c0 += kTile) {
    if (ids && apart(q_ids, id_range(ids, c0, tk))) continue;  // the whole block alike
    __syncthreads();  // the previous tile's products are done with ks, vs, dss
    load_tile(ks, k, a.ld_k, c0, tk, d, dp);
    load_tile(vs, v, a.ld_v, c0, tk, d, dp);
    __syncthreads();
    block_gemm<S, false, true>(kTile, kTile, dp, qs, dp, ks, dp, sc, kTile, false);    // S = Q K^T
    block_gemm<S, false, true>(kTile, kTile, dp, dos, dp, vs, dp, dpm, kTile, false);  // dP = dO V^T
    __syncthreads();
    tile_softmax_grad(a, r0, c0, keep, ids, sc, dpm, lse_rows, d_rows, ps, dss, scale);
    __syncthreads();
    block_gemm<S, false, false>(kTile, dp, kTile, dss, kTile, ks, dp, dq, dp, true);  // dQ += dS K
  }
  __syncthreads();
  S* dq_out = static_cast<S*>(gr.dq) + b * t * gr.ld_dq + h * d;
  for (int e = int(threadIdx.x); e < kTile * d; e += int(blockDim.x)) {
    const int r = e / d, c = e % d;
    if (r0 + r < t) dq_out[(r0 + r) * gr.ld_dq + c] = from_f<S>(dq[r * dp + c]);
  }
}

// Sets the kernel's dynamic shared memory limit when it needs more than the
// default 48 KiB (D = 64 f32: 41 KiB forward, 66 KiB backward).
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <typename S>
cudaError_t forward_as(const AttentionArgs& a, void* out, float* lse, cudaStream_t stream) {
  const int dp = padded_dim(a.head_dim);
  const std::size_t smem = forward_smem_bytes(sizeof(S), dp);
  if (const cudaError_t e = allow_smem(attention_forward_kernel<S>, smem); e != cudaSuccess) return e;
  const dim3 grid(unsigned((a.t + kTile - 1) / kTile), unsigned(a.n_head), unsigned(a.batch));
  attention_forward_kernel<S><<<grid, kThreads, smem, stream>>>(a, static_cast<S*>(out), lse);
  return cudaGetLastError();
}

template <typename S>
cudaError_t backward_as(const AttentionArgs& a, const AttentionGrads& gr, cudaStream_t stream) {
  const int dp = padded_dim(a.head_dim);
  const std::size_t smem = backward_smem_bytes(sizeof(S), dp);
  if (const cudaError_t e = allow_smem(attention_backward_kv_kernel<S>, smem); e != cudaSuccess) return e;
  if (const cudaError_t e = allow_smem(attention_backward_q_kernel<S>, smem); e != cudaSuccess) return e;
  // dK and dV by key tiles, dQ by query tiles (either may be none).
  const unsigned key_tiles = unsigned((a.tk + kTile - 1) / kTile), query_tiles = unsigned((a.t + kTile - 1) / kTile);
  if (key_tiles > 0) {
    attention_backward_kv_kernel<S>
        <<<dim3(key_tiles, unsigned(a.n_kv_head), unsigned(a.batch)), kThreads, smem, stream>>>(a, gr);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (query_tiles > 0)
    attention_backward_q_kernel<S>
        <<<dim3(query_tiles, unsigned(a.n_head), unsigned(a.batch)), kThreads, smem, stream>>>(a, gr);
  return cudaGetLastError();
}

}  // namespace

std::size_t attention_smem_bytes(DType dtype, std::int64_t head_dim) {
  const std::size_t es = dtype == DType::kF32 ? 4 : 2;
  const int dp = padded_dim(head_dim);
  return std::max(forward_smem_bytes(es, dp), backward_smem_bytes(es, dp));
}

cudaError_t launch_attention_forward(const AttentionArgs& a, void* out, float* lse, cudaStream_t stream) {
  if (a.batch == 0 || a.t == 0) return cudaSuccess;
  switch (a.dtype) {
    case DType::kF32: return forward_as<float>(a, out, lse, stream);
    case DType::kF16: return forward_as<__half>(a, out, lse, stream);
    case DType::kBF16: return forward_as<__nv_bfloat16>(a, out, lse, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_attention_backward(const AttentionArgs& a, const AttentionGrads& gr, cudaStream_t stream) {
  if (a.batch == 0 || (a.t == 0 && a.tk == 0)) return cudaSuccess;
  switch (a.dtype) {
    case DType::kF32: return backward_as<float>(a, gr, stream);
    case DType::kF16: return backward_as<__half>(a, gr, stream);
    case DType::kBF16: return backward_as<__nv_bfloat16>(a, gr, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ht::cuda
