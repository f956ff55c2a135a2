// Attention tests' reference: the definition computed in double precision
// with the softmax materialised (the (T, T) probabilities of every head), and
// the backward written from it: dP = dO V^T, dS = P (dP - rowsum(P dP)) / sqrt(D),
// dQ = dS K, dK = dS^T Q, dV = P^T dO. Independent of the tiled drivers.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace ht::test {

/// The sizes and masks of one reference call: q (B, T, H*D), k and v (B, T,
/// KV*D) row-major; mask (B, T), nonzero = key may be attended, or empty;
/// segments (B, T), query i sees key j only when their ids are equal, or
/// empty.
struct AttentionRefShape {
  std::int64_t b, t, h, kv, d;
  bool causal;
};

struct AttentionRef {
  std::vector<double> out;    // (B, T, H*D)
  std::vector<double> lse;    // (B, H, T); -inf for a row without keys
  std::vector<double> probs;  // (B, H, T, T)
};

struct AttentionRefGrads {
  std::vector<double> dq, dk, dv;
};

inline bool ref_visible(const AttentionRefShape& s, const std::vector<std::int32_t>& mask,
                        const std::vector<std::int32_t>& segments, std::int64_t b, std::int64_t i, std::int64_t j) {
  return (!s.causal || j <= i) && (mask.empty() || mask[std::size_t(b * s.t + j)] != 0) &&
         (segments.empty() || segments[std::size_t(b * s.t + i)] == segments[std::size_t(b * s.t + j)]);
}

inline AttentionRef attention_reference(const AttentionRefShape& s, const std::vector<double>& q,
                                        const std::vector<double>& k, const std::vector<double>& v,
                                        const std::vector<std::int32_t>& mask,
                                        const std::vector<std::int32_t>& segments = {}) {
  const std::int64_t t = s.t, d = s.d, wq = s.h * d, wk = s.kv * d, group = s.h / s.kv;
  AttentionRef r;
  r.out.assign(std::size_t(s.b * t * wq), 0.0);
  r.lse.assign(std::size_t(s.b * s.h * t), -INFINITY);
  r.probs.assign(std::size_t(s.b * s.h * t * t), 0.0);
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> row(static_cast<std::size_t>(t));
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.h; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < t; ++i) {
        double mx = -INFINITY;
        for (std::int64_t j = 0; j < t; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c)
            dot += q[std::size_t((b * t + i) * wq + h * d + c)] * k[std::size_t((b * t + j) * wk + g * d + c)];
          row[std::size_t(j)] = ref_visible(s, mask, segments, b, i, j) ? dot * scale : -INFINITY;
          mx = std::max(mx, row[std::size_t(j)]);
        }
        if (mx == -INFINITY) continue;  // no key: zeros, lse -inf
        double sum = 0;
        for (std::int64_t j = 0; j < t; ++j) sum += std::exp(row[std::size_t(j)] - mx);
        r.lse[std::size_t((b * s.h + h) * t + i)] = mx + std::log(sum);
        double* p = r.probs.data() + ((b * s.h + h) * t + i) * t;
        for (std::int64_t j = 0; j < t; ++j) p[j] = std::exp(row[std::size_t(j)] - mx) / sum;
        for (std::int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j < t; ++j) o += p[j] * v[std::size_t((b * t + j) * wk + g * d + c)];
          r.out[std::size_t((b * t + i) * wq + h * d + c)] = o;
        }
      }
    }
  return r;
}

inline AttentionRefGrads attention_reference_backward(const AttentionRefShape& s, const std::vector<double>& q,
                                                      const std::vector<double>& k, const std::vector<double>& v,
                                                      const AttentionRef& fwd, const std::vector<double>& dout) {
  const std::int64_t t = s.t, d = s.d, wq = s.h * d, wk = s.kv * d, group = s.h / s.kv;
  const double scale = 1.0 / std::sqrt(double(d));
  AttentionRefGrads g;
  g.dq.assign(q.size(), 0.0);
  g.dk.assign(k.size(), 0.0);
  g.dv.assign(v.size(), 0.0);
  std::vector<double> ds(static_cast<std::size_t>(t));
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.h; ++h) {
      const std::int64_t kvh = h / group;
      for (std::int64_t i = 0; i < t; ++i) {
        const double* p = fwd.probs.data() + ((b * s.h + h) * t + i) * t;
        const double* go = dout.data() + (b * t + i) * wq + h * d;
        double dot = 0;
        for (std::int64_t j = 0; j < t; ++j) {
          double dp = 0;
          for (std::int64_t c = 0; c < d; ++c) dp += go[c] * v[std::size_t((b * t + j) * wk + kvh * d + c)];
          ds[std::size_t(j)] = dp;
          dot += p[j] * dp;
        }
        for (std::int64_t j = 0; j < t; ++j) ds[std::size_t(j)] = p[j] * (ds[std::size_t(j)] - dot) * scale;
        for (std::int64_t j = 0; j < t; ++j)
          for (std::int64_t c = 0; c < d; ++c) {
            const std::size_t kj = std::size_t((b * t + j) * wk + kvh * d + c);
            g.dq[std::size_t((b * t + i) * wq + h * d + c)] += ds[std::size_t(j)] * k[kj];
            g.dk[kj] += ds[std::size_t(j)] * q[std::size_t((b * t + i) * wq + h * d + c)];
            g.dv[kj] += p[j] * go[c];
          }
      }
    }
  return g;
}

}  // namespace ht::test
