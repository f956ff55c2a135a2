// Host flash attention, one body for both public forms (packed qkv, and
// separate q, k, v with grouped-query heads and masks; see
// ops/attention_views.h): tiles of query rows against tiles of keys with an
// online softmax, the algorithm of the CUDA kernels (ht/ops/attention.h).
// Each tile product is a single-threaded sgemm on strided views of the
// inputs; the per-row softmax work is vector loops (vexp, reductions in a
// fixed lane order). No (T, T) matrix exists: a thread's scratch is a few
// tiles.
//
// Segment ids (document masking): a tile pair whose query rows and keys
// hold disjoint ranges of ids is skipped; one whose rows and keys all hold
// the same id runs as without ids; a mixed one sets the scores of other
// segments' keys to -inf before the softmax, which the row functions below
// treat as any masked key (probability exactly 0). Skipping a tile changes
// no bit: its keys would add exact zeros and leave every maximum alone.
//
// Parallelism and determinism. Forward tasks are (batch, query head, query
// tile) triples: each writes its own rows of out and lse, walking its key
// tiles in order, so any schedule gives the same bits. Backward tasks are
// (batch, key/value head) pairs: the task walks its query heads, their query
// tiles and key tiles in a fixed order, adding into dQ, dK and dV, so the
// sums over a group of query heads and over tiles have one order whatever
// the thread count.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention_views.h"
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"
#include "softmax.cuh"

namespace ht::ops::cpu {
namespace {

using detail::AttentionShape;
using detail::QkvViews;

// Tile sizes: query rows x keys per tile. Measured forward + backward, f32,
// packed causal form, B 4, H 12, D 64 (GPT-2 small's heads), 2 threads,
// OPENBLAS_CORETYPE=SkylakeX, two rounds on a loaded machine (load average
// 7.7 on 2 cores), ms at T = 256 / T = 1024:
//   32 x 64   12.4 / 273, 12.0 / 283     128 x 64   11.8 / 225, 10.5 / 222
//   64 x 64    9.8 / 195, 10.9 / 271     128 x 128  10.2 / 195, 10.7 / 213
//   64 x 128  12.6 / 253, 10.5 / 215     64 x 256   14.8 / 298, 13.0 / 227
//   32 x 128  12.7 / 267, 12.5 / 228
// 64 x 64 and 128 x 128 lead within the noise; 64 x 64 keeps the scratch
// (two 16 KiB tiles of scores) in L1/L2 and wastes least at the diagonal and
// at short T. Narrower query tiles make more, smaller sgemm calls (slower).
constexpr std::int64_t kQueryTile = 64;
constexpr std::int64_t kKeyTile = 64;

void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

/// The additive key mask of each batch entry: (B, T) floats, 0 where the key
/// may be attended and -inf where not; empty without a mask.
std::vector<float> key_bias(const Tensor& key_mask) {
  if (!key_mask.defined()) return {};
  const std::int32_t* m = key_mask.data<std::int32_t>();
  std::vector<float> bias(std::size_t(key_mask.numel()));
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = m[i] != 0 ? 0.f : -INFINITY;
  return bias;
}

/// How many leading columns of the key tile starting at c0 (cols wide) query
/// row i may see: all of them, or under the causal mask those with key <=
/// i + offset (0 for a row above the tile). Worked example: tile c0 = 64 of
/// 64 keys, offset 0, row 70 sees keys 64..70, 7 columns; row 10 sees none.
std::int64_t visible_cols(std::int64_t i, std::int64_t c0, std::int64_t cols, bool causal, std::int64_t offset) {
  if (!causal) return cols;
  return std::clamp<std::int64_t>(i + offset + 1 - c0, 0, cols);
}

/// How the segment ids of a tile pair (query rows [r0, r1), keys [c0, c1))
/// mask it: none of its entries can be attended, all can (as far as the
/// ids go: no ids, or one id throughout), or some.
enum class TileSegments { kSkip, kAll, kMixed };

TileSegments tile_segments(const std::int32_t* ids, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                           std::int64_t c1) {
  if (!ids) return TileSegments::kAll;
  const auto [q_lo, q_hi] = std::minmax_element(ids + r0, ids + r1);
  const auto [k_lo, k_hi] = std::minmax_element(ids + c0, ids + c1);
  if (*q_hi < *k_lo || *k_hi < *q_lo) return TileSegments::kSkip;
  return *q_lo == *q_hi && *k_lo == *k_hi && *q_lo == *k_lo ? TileSegments::kAll : TileSegments::kMixed;
}

// The first `len` scores of a query row of segment `id`: -inf where the
// key's id (key_ids[j]) differs.
HT_CPU_MULTIVERSION void mask_segment_row(float* s, std::int64_t len, const std::int32_t* key_ids, std::int32_t id) {
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) s[j] = key_ids[j] == id ? s[j] : -INFINITY;
}

// One row of a forward tile: s holds the row's `cols` scaled scores, of which
// the first `len` are visible (bias: the key mask's 0 / -inf for these keys,
// or null). The row's running maximum m and sum l are updated, s becomes the
// unnormalised probabilities exp(s - m_new) (zeros past len and for masked
// keys); returns the factor exp(m_old - m_new) by which the row's accumulated
// output must be rescaled (1 when the maximum did not move). The loops count
// to `len` and take the max as a select: GCC vectorises those forms.
HT_CPU_MULTIVERSION float online_softmax_row(float* s, std::int64_t len, std::int64_t cols, const float* bias,
                                             float& m, float& l) {
  float mx = -INFINITY;
  if (bias) {
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < len; ++j) {
      const float x = s[j] + bias[j];
      s[j] = x;
      mx = x > mx ? x : mx;
    }
  } else {
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < len; ++j) mx = s[j] > mx ? s[j] : mx;
  }
  const float m_new = mx > m ? mx : m;
  if (m_new == -INFINITY) {  // no admissible key yet: the row stays empty
    std::fill(s, s + cols, 0.f);
    return 1.f;
  }
  const float alpha = m == m_new ? 1.f : vexp(m - m_new);  // vexp(-inf) = 0: the first keys of the row
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < len; ++j) {
    const float e = vexp(s[j] - m_new);  // a masked key: vexp(-inf) = 0
    s[j] = e;
    sum += e;
  }
  std::fill(s + len, s + cols, 0.f);
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

// One row of a backward tile: s holds the row's scaled scores, dp the row of
// dO V^T. s becomes P = exp(s + bias - lse) over the first `len` columns
// (zeros after, and everywhere when lse = -inf: a row without keys), dp
// becomes dS = P (dP - d_row) * scale.
HT_CPU_MULTIVERSION void backward_row(float* s, float* dp, std::int64_t len, std::int64_t cols, const float* bias,
                                      float lse, float d_row, float scale) {
  if (lse == -INFINITY) len = 0;
  if (bias) {
#pragma omp simd
    for (std::int64_t j = 0; j < len; ++j) s[j] = vexp(s[j] + bias[j] - lse);
  } else {
#pragma omp simd
    for (std::int64_t j = 0; j < len; ++j) s[j] = vexp(s[j] - lse);
  }
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) dp[j] = kern::softmax_grad(s[j], dp[j], d_row) * scale;
  std::fill(s + len, s + cols, 0.f);
  std::fill(dp + len, dp + cols, 0.f);
}

HT_CPU_MULTIVERSION void scale_row(float* x, std::int64_t n, float a) {
#pragma omp simd
  for (std::int64_t c = 0; c < n; ++c) x[c] *= a;
}

HT_CPU_MULTIVERSION float dot_row(const float* a, const float* b, std::int64_t n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

// rows x cols of a strided matrix set to zero.
void zero_rows(float* x, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  for (std::int64_t i = 0; i < rows; ++i) std::fill(x + i * ld, x + i * ld + cols, 0.f);
}

// Forward: out (B, T, H*D) and lse (B, H, T). Task (b, h, query tile):
// acc (rows x D) accumulates exp(S - m) V over the key tiles, rescaled
// whenever a row's maximum m grows; at the end out = acc / l.
void forward(const AttentionShape& s, const QkvViews<const float>& in, const std::vector<float>& bias,
             const std::int32_t* segments, float* out, float* lse) {
  if (s.batch * s.t * s.head_dim == 0) return;
  const std::int64_t t = s.t, tk = s.tk, d = s.head_dim, ld_out = s.q_width();
  const std::int64_t q_tiles = (t + kQueryTile - 1) / kQueryTile;
  const float scale = 1.f / std::sqrt(float(d));
#pragma omp parallel
  {
    std::vector<float> st(std::size_t(kQueryTile * kKeyTile)), acc(std::size_t(kQueryTile * d));
    std::vector<float> m(kQueryTile), l(kQueryTile), alpha(kQueryTile);
#pragma omp for schedule(dynamic)
    for (std::int64_t task = 0; task < s.batch * s.n_head * q_tiles; ++task) {
      const std::int64_t bh = task / q_tiles, b = bh / s.n_head, h = bh % s.n_head, g = h / s.group();
      const std::int64_t r0 = (task % q_tiles) * kQueryTile, r1 = std::min(t, r0 + kQueryTile), rows = r1 - r0;
      const float* q = in.q + (b * t + r0) * in.ld_q + h * d;
      const float* k = in.k + b * tk * in.ld_k + g * d;
      const float* v = in.v + b * tk * in.ld_v + g * d;
      const float* row_bias = bias.empty() ? nullptr : bias.data() + b * tk;
      const std::int32_t* ids = segments ? segments + b * t : nullptr;  // t == tk with ids
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.f);
      std::fill(acc.begin(), acc.end(), 0.f);
      // Causal: key tiles starting past the last row r1 - 1 are fully masked.
      const std::int64_t key_end = s.causal ? std::min(r1 + s.offset, tk) : tk;
      for (std::int64_t c0 = 0; c0 < key_end; c0 += kKeyTile) {
        const std::int64_t cols = std::min(tk, c0 + kKeyTile) - c0;
        const TileSegments segs = tile_segments(ids, r0, r1, c0, c0 + cols);
        if (segs == TileSegments::kSkip) continue;
        // S = scale * Q_i K_j^T, rows x cols.
        sgemm(false, true, rows, cols, d, scale, q, in.ld_q, k + c0 * in.ld_k, in.ld_k, 0.f, st.data(), kKeyTile);
        bool rescale = false;
        for (std::int64_t ii = 0; ii < rows; ++ii) {
          float* row = st.data() + ii * kKeyTile;
          const std::int64_t len = visible_cols(r0 + ii, c0, cols, s.causal, s.offset);
          if (segs == TileSegments::kMixed) mask_segment_row(row, len, ids + c0, ids[r0 + ii]);
          alpha[ii] = online_softmax_row(row, len, cols, row_bias ? row_bias + c0 : nullptr, m[ii], l[ii]);
          rescale |= alpha[ii] != 1.f;
        }
        if (rescale)
          for (std::int64_t ii = 0; ii < rows; ++ii)
            if (alpha[ii] != 1.f) scale_row(acc.data() + ii * d, d, alpha[ii]);
        // acc += P V_j.
        sgemm(false, false, rows, d, cols, 1.f, st.data(), kKeyTile, v + c0 * in.ld_v, in.ld_v, 1.f, acc.data(), d);
      }
      float* o = out + (b * t + r0) * ld_out + h * d;
      float* row_lse = lse + bh * t + r0;
      for (std::int64_t ii = 0; ii < rows; ++ii) {
        float* o_row = o + ii * ld_out;
        std::copy(acc.data() + ii * d, acc.data() + (ii + 1) * d, o_row);
        scale_row(o_row, d, l[ii] > 0.f ? 1.f / l[ii] : 0.f);  // a row without keys: zeros
        row_lse[ii] = kern::attention_lse(m[ii], l[ii]);
      }
    }
  }
}

// Backward, one task per (batch, key/value head). For each of its query
// heads, D = rowsum(dO * O); then for each query tile i and each key tile j
// it may see: P = exp(S - lse), dV_j += P^T dO_i, dP = dO_i V_j^T, dS = P (dP
// - D) scale, dQ_i += dS K_j, dK_j += dS^T Q_i. The outputs are zeroed first
// and every product adds (beta 1), in this fixed order.
void backward(const AttentionShape& s, const float* dout, const QkvViews<const float>& in, const float* out,
              const float* lse, const std::vector<float>& bias, const std::int32_t* segments,
              const QkvViews<float>& grad) {
  if (s.batch * s.t * s.head_dim == 0 && s.batch * s.tk * s.head_dim == 0) return;
  const std::int64_t t = s.t, tk = s.tk, d = s.head_dim, ld_out = s.q_width();
  const float scale = 1.f / std::sqrt(float(d));
#pragma omp parallel
  {
    std::vector<float> st(std::size_t(kQueryTile * kKeyTile)), dp(std::size_t(kQueryTile * kKeyTile));
    std::vector<float> d_rows(static_cast<std::size_t>(t));
#pragma omp for schedule(dynamic)
    for (std::int64_t bg = 0; bg < s.batch * s.n_kv_head; ++bg) {
      const std::int64_t b = bg / s.n_kv_head, g = bg % s.n_kv_head;
      const float* k = in.k + b * tk * in.ld_k + g * d;
      const float* v = in.v + b * tk * in.ld_v + g * d;
      float* dk = grad.k + b * tk * grad.ld_k + g * d;
      float* dv = grad.v + b * tk * grad.ld_v + g * d;
      const float* row_bias = bias.empty() ? nullptr : bias.data() + b * tk;
      const std::int32_t* ids = segments ? segments + b * t : nullptr;  // t == tk with ids
      zero_rows(dk, tk, d, grad.ld_k);
      zero_rows(dv, tk, d, grad.ld_v);
      for (std::int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
        const float* q = in.q + b * t * in.ld_q + h * d;
        const float* go = dout + b * t * ld_out + h * d;
        const float* o = out + b * t * ld_out + h * d;
        const float* head_lse = lse + (b * s.n_head + h) * t;
        float* dq = grad.q + b * t * grad.ld_q + h * d;
        zero_rows(dq, t, d, grad.ld_q);
        for (std::int64_t i = 0; i < t; ++i) d_rows[std::size_t(i)] = dot_row(go + i * ld_out, o + i * ld_out, d);
        for (std::int64_t r0 = 0; r0 < t; r0 += kQueryTile) {
          const std::int64_t r1 = std::min(t, r0 + kQueryTile), rows = r1 - r0;
          const std::int64_t key_end = s.causal ? std::min(r1 + s.offset, tk) : tk;
          for (std::int64_t c0 = 0; c0 < key_end; c0 += kKeyTile) {
            const std::int64_t cols = std::min(tk, c0 + kKeyTile) - c0;
            const TileSegments segs = tile_segments(ids, r0, r1, c0, c0 + cols);
            if (segs == TileSegments::kSkip) continue;
            sgemm(false, true, rows, cols, d, scale, q + r0 * in.ld_q, in.ld_q, k + c0 * in.ld_k, in.ld_k, 0.f,
                  st.data(), kKeyTile);
            sgemm(false, true, rows, cols, d, 1.f, go + r0 * ld_out, ld_out, v + c0 * in.ld_v, in.ld_v, 0.f,
                  dp.data(), kKeyTile);
            for (std::int64_t ii = 0; ii < rows; ++ii) {
              float* row = st.data() + ii * kKeyTile;
              const std::int64_t len = visible_cols(r0 + ii, c0, cols, s.causal, s.offset);
              if (segs == TileSegments::kMixed) mask_segment_row(row, len, ids + c0, ids[r0 + ii]);
              backward_row(row, dp.data() + ii * kKeyTile, len, cols, row_bias ? row_bias + c0 : nullptr,
                           head_lse[r0 + ii], d_rows[std::size_t(r0 + ii)], scale);
            }
            // dV_j += P^T dO_i ; dK_j += dS^T Q_i ; dQ_i += dS K_j.
            sgemm(true, false, cols, d, rows, 1.f, st.data(), kKeyTile, go + r0 * ld_out, ld_out, 1.f,
                  dv + c0 * grad.ld_v, grad.ld_v);
            sgemm(true, false, cols, d, rows, 1.f, dp.data(), kKeyTile, q + r0 * in.ld_q, in.ld_q, 1.f,
                  dk + c0 * grad.ld_k, grad.ld_k);
            sgemm(false, false, rows, d, cols, 1.f, dp.data(), kKeyTile, k + c0 * in.ld_k, in.ld_k, 1.f,
                  dq + r0 * grad.ld_q, grad.ld_q);
          }
        }
      }
    }
  }
}

const std::int32_t* ids_of(const Tensor& segment_ids) {
  return segment_ids.defined() ? segment_ids.data<std::int32_t>() : nullptr;
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, const Tensor& segment_ids, Tensor& out, Tensor& lse) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  forward(s, detail::packed_views<const float>(qkv.data<float>(), s.q_width()), {}, ids_of(segment_ids),
          out.data<float>(), lse.data<float>());
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                        const Tensor& segment_ids, Tensor& dqkv) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  backward(s, dout.data<float>(), detail::packed_views<const float>(qkv.data<float>(), s.q_width()),
           out.data<float>(), lse.data<float>(), {}, ids_of(segment_ids),
           detail::packed_views(dqkv.data<float>(), s.q_width()));
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                       const Tensor& key_mask, const Tensor& segment_ids, Tensor& out, Tensor& lse) {
  const AttentionShape s = detail::attention_shape(q, k, o);
  forward(s, detail::separate_views<const float>(q.data<float>(), k.data<float>(), v.data<float>(), s),
          key_bias(key_mask), ids_of(segment_ids), out.data<float>(), lse.data<float>());
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& o, const Tensor& key_mask,
                        const Tensor& segment_ids, Tensor& dq, Tensor& dk, Tensor& dv) {
  const AttentionShape s = detail::attention_shape(q, k, o);
  backward(s, dout.data<float>(), detail::separate_views<const float>(q.data<float>(), k.data<float>(), v.data<float>(), s),
           out.data<float>(), lse.data<float>(), key_bias(key_mask), ids_of(segment_ids),
           detail::separate_views(dq.data<float>(), dk.data<float>(), dv.data<float>(), s));
}

}  // namespace ht::ops::cpu
