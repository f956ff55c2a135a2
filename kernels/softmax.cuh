// Softmax pieces shared by attention and cross-entropy on both drivers.
#pragma once

#include <cmath>
#include <cstdint>

#include "ht/core/macros.h"

namespace ht::kern {

/// Gradient of softmax input i: p_i * (dp_i - sum_j p_j dp_j).
HT_HD float softmax_grad(float p, float dp, float sum_p_dp) { return p * (dp - sum_p_dp); }

/// Cross-entropy gradient for one logit: (softmax - target distribution) *
/// dloss, with softmax recomputed from the row's log-sum-exp; the target
/// distribution is (1 - eps) onehot + uniform, uniform = eps / V (label
/// smoothing; eps 0: the one-hot).
HT_HD float cross_entropy_grad(float logit, float lse, bool is_target, float dloss, float eps = 0.f,
                               float uniform = 0.f) {
  return (expf(logit - lse) - (is_target ? 1.f - eps : 0.f) - uniform) * dloss;
}

/// How many leading keys attention query row i (of t) may see: [0, i] under
/// a causal mask, all t otherwise. A key padding mask then removes keys
/// within them; the probabilities past this count are zeros.
HT_HD std::int64_t attention_visible_keys(std::int64_t i, std::int64_t t, bool causal) { return causal ? i + 1 : t; }

/// The log-sum-exp attention saves for a row whose online softmax ended with
/// maximum m and sum l of exp(s - m): m + log(l), or -inf for a row that saw
/// no key (l == 0), whose probabilities backward then takes as all zero.
HT_HD float attention_lse(float m, float l) { return l > 0.f ? m + logf(l) : -INFINITY; }

}  // namespace ht::kern
