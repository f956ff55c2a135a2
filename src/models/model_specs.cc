// The bundled models' nn::ModelSpec: their layers as the planner sees them.
//
// Counted from what this library's layers do, per token (C width, H heads,
// F the MLP's hidden size, Vp the padded vocabulary, T the sequence):
//   GPT block, kept for backward: ln_1's and ln_2's inputs and statistics,
//   the inputs of c_attn and c_fc (whole on every tp rank: 4C + 4 f32), and
//   qkv (3C), attention's output (C, also c_proj's input), the MLP's hidden
//   h and GELU(h) (4C each) and the log-sum-exp (H f32), split over tp.
//   Selective recomputation drops attention's output and log-sum-exp; full
//   keeps the block's input (C) alone.
//   Llama block: the two RMSNorms' inputs and rstd, the projections' and
//   gate_up's inputs (4C + 2 f32), q (C), k and v (kv each), attention's
//   output (C), gate_up's output (2F) and the SwiGLU product (F), and H f32.
//   Llama mixture-of-experts block (nn::MoE in place of the MLP, whole on
//   every tp rank): attention's part as above; for the mixture the routing
//   on the host (2 E + 4 top_k f32), per routed row (top_k a token) its
//   input, gate_up's output and the SwiGLU product (C + 3F), the expert's
//   output and the row's weight (2C), and the shared experts' 3 S F.
//   Last stage: the norm's input, the head's input, the logits (Vp / tp, kept
//   until backward turns them into their gradient in place), targets and lse.
// Attention's core is 2 T C FLOPs per token forward (Q Kᵀ and P V over the
// causal half: masked tiles are skipped).
#include <algorithm>
#include <cmath>

#include "ht/models/gpt.h"
#include "ht/models/llama.h"

namespace ht::models {
namespace {

using nn::LayerRole;
using nn::LayerSpec;
using nn::TokenElements;

/// The same saved elements under every recomputation mode (embedding, head).
std::array<TokenElements, nn::kRecomputeModes> same_saved(TokenElements t) { return {t, t, t}; }

LayerSpec embedding_layer(std::int64_t vocab_rows, std::int64_t c, std::int64_t positions) {
  LayerSpec l;
  l.name = "embedding";
  l.role = LayerRole::kFirst;
  l.params_split = vocab_rows * c;  // vocab-parallel rows
  l.params_replicated = positions * c;
  l.saved = same_saved({.f32_replicated = 1});  // the token ids
  l.traffic = {.replicated = double(2 * c)};
  l.tp_allreduce = double(c);  // each rank's rows' part of the lookup, summed
  l.tp_allreduces = 1;
  l.ops = 2;
  return l;
}

/// Final norm (norm_params, norm_stats f32 per token), head and loss.
LayerSpec head_layer(std::int64_t vocab_rows, std::int64_t c, std::int64_t norm_params, double norm_stats,
                     int shares_with) {
  LayerSpec l;
  l.name = "head";
  l.role = LayerRole::kLast;
  l.params_replicated = norm_params;
  if (shares_with >= 0) {
    l.shares_with = shares_with;
    l.shared_params_split = vocab_rows * c;
  } else {
    l.params_split = vocab_rows * c;
  }
  l.gemm_flops = 2.0 * double(c) * double(vocab_rows);
  // The norm's and head's inputs; logits; targets and lse.
  l.saved = same_saved({.split = double(vocab_rows), .replicated = double(2 * c),
                        .f32_replicated = norm_stats + 2.0});
  // The head's input gradient; the norm's own replaces the head's input,
  // freed as the head's backward ends.
  l.backward_workspace = {.replicated = double(c)};
  // Backward turns the logits into their gradient in place and holds it
  // until the stage's backward returns.
  l.held = {.split = double(vocab_rows)};
  // ZB-H1: the head's input (its weight GEMM's); the logits' gradient is held already.
  l.deferred = {.replicated = double(c)};
  l.traffic = {.split = 3.0 * double(vocab_rows), .replicated = double(3 * c)};
  l.tp_allreduce = 0.5 * double(c);  // the input gradient's sum, backward only
  l.tp_allreduces = 1;
  l.ops = 5;  // norm, head GEMM, the loss's forward and backward halves
  return l;
}

}  // namespace

nn::ModelSpec GPTConfig::spec(std::int64_t seq_len) const {
  validate();
  const std::int64_t c = n_embd, vp = padded_vocab_size();
  const double cd = double(c), t = double(seq_len);
  nn::ModelSpec s;
  s.description = "GPT " + str();
  s.seq_len = seq_len;
  s.width = c;
  s.kv_width = c;
  s.tp_divides = {n_head, vp};
  s.layers.push_back(embedding_layer(vp, c, context));
  for (int i = 0; i < n_layer; ++i) {
    LayerSpec b;
    b.name = fmt::format("h.{}", i);
    b.params_split = 3 * c * c + 3 * c + c * c + 4 * c * c + 4 * c + 4 * c * c;
    b.params_replicated = 4 * c + 2 * c;  // two LayerNorms; the row-parallel layers' biases
    b.gemm_flops = 2.0 * 12.0 * cd * cd;
    b.attention_flops = 2.0 * t * cd;
    const TokenElements none{.split = 12.0 * cd, .replicated = 4.0 * cd, .f32_split = double(n_head),
                             .f32_replicated = 4.0};
    TokenElements selective = none;
    selective.split -= cd;
    selective.f32_split = 0;
    b.saved = {none, selective, TokenElements{.replicated = cd}};
    // The output's gradient, then the MLP's hidden gradient (each layer's
    // saved input goes once its backward is done).
    b.backward_workspace = {.split = 4.0 * cd, .replicated = cd};
    // ZB-H1: the four Linears' inputs (ln_1's and ln_2's outputs, attention's
    // output, GELU's) and outputs' gradients (q, k, v; the projection's; the
    // MLP's hidden; its projection's).
    b.deferred = {.split = 5.0 * cd + 7.0 * cd, .replicated = 2.0 * cd + 2.0 * cd};
    b.traffic = {.split = 8.0 * cd, .replicated = 10.0 * cd};
    b.tp_allreduce = 2.0 * cd;
    b.tp_allreduces = 2;
    b.ops = 14;  // 2 norms, 4 linears (bias and GEMM), attention, GELU, 2 residual adds
    s.layers.push_back(std::move(b));
  }
  s.layers.push_back(head_layer(vp, c, 2 * c, 2.0, /*shares_with=*/0));
  return s;
}

nn::ModelSpec LlamaConfig::spec(std::int64_t seq_len) const {
  validate();
  const std::int64_t c = n_embd, vp = padded_vocab_size(), kv = n_embd / n_head * n_kv_head, f = ffn_hidden;
  const double cd = double(c), fd = double(f), t = double(seq_len);
  nn::ModelSpec s;
  s.description = "Llama " + str();
  s.seq_len = seq_len;
  s.width = c;
  // Context parallelism: not with a mixture's load-balancing loss or
  // capacity (Llama::supports_context_parallel).
  const bool cp_ok = experts == 0 || (moe_aux_loss_coeff == 0.f && moe_capacity_factor == 0.f);
  s.kv_width = cp_ok ? c / n_head * n_kv_head : 0;
  bool dense_mlp = false;
  for (int i = 0; i < n_layer; ++i) dense_mlp = dense_mlp || !moe_layer(i);
  // The mixtures' experts are not split over tp: the MLP's hidden size
  // needs to divide only where a dense MLP is.
  s.tp_divides = {n_head, n_kv_head, vp};
  if (dense_mlp) s.tp_divides.push_back(f);
  s.layers.push_back(embedding_layer(vp, c, 0));
  for (int i = 0; i < n_layer; ++i) {
    LayerSpec b;
    b.name = fmt::format("layers.{}", i);
    b.params_split = 2 * c * c + 2 * c * kv + 3 * c * f + (qkv_bias ? c + 2 * kv : 0);
    b.params_replicated = 2 * c;
    b.gemm_flops = 2.0 * double(2 * c * c + 2 * c * kv + 3 * c * f);
    b.attention_flops = 2.0 * t * cd;
    TokenElements none{.split = 2.0 * cd + 2.0 * double(kv) + 3.0 * fd, .replicated = 4.0 * cd,
                       .f32_split = double(n_head), .f32_replicated = 2.0};
    b.backward_workspace = {.split = 2.0 * fd, .replicated = 2.0 * cd};  // dy and d, then dgu (down's input gone)
    // ZB-H1: the projections' inputs (the normed input, read by q, k and v;
    // attention's output; the second norm's output; SwiGLU's) and outputs'
    // gradients (q, k, v, o; gate_up; down).
    b.deferred = {.split = (cd + fd) + (cd + 2.0 * double(kv) + 2.0 * fd), .replicated = 2.0 * cd + 2.0 * cd};
    b.traffic = {.split = 6.0 * fd + 4.0 * cd, .replicated = 8.0 * cd};
    b.tp_allreduce = 2.0 * cd;
    b.tp_allreduces = 2;
    b.ops = 15;  // 2 norms, 5 projections, 2 rotary, attention, SwiGLU, 2 residual adds
    if (moe_layer(i)) {
      // The mixture (nn::MoE) in place of the SwiGLU MLP, whole on every tp
      // rank: the router (C x E) and the shared experts (one SwiGLU of S F)
      // data-parallel, the E routed experts (3 C F each) over ep.
      const double k = double(top_k), sf = double(shared_experts) * fd;
      b.params_split = 2 * c * c + 2 * c * kv;
      b.params_replicated = 2 * c + c * experts + 3 * c * shared_experts * f;
      b.experts = experts;
      b.top_k = top_k;
      b.params_expert = std::int64_t(experts) * 3 * c * f;
      b.gemm_flops = 2.0 * double(2 * c * c + 2 * c * kv);
      b.gemm_flops_replicated = 2.0 * (cd * double(experts) + 3.0 * cd * (k * fd + sf));
      // Kept: the routing on the host (logits and scores, E f32 each; per
      // choice its expert, score, weight and position; each routed row's
      // token and the per-layer counts are the allocator's "other" memory,
      // not counted here), and per routed row (top_k a token) its input, the
      // expert's gate_up output and SwiGLU product (3F), its output and its
      // weight spread over the row (C each); the shared experts' 3 S F.
      none.split -= 3.0 * fd;
      none.replicated += k * (3.0 * cd + 3.0 * fd) + 3.0 * sf;
      none.f32_replicated += 2.0 * double(experts) + 4.0 * k;
      // Backward: the routed rows' output gradients, their products with the
      // outputs and the rows' gradients (C each), the experts' input
      // gradients (C) and gate_up gradients (2F); the shared experts' 2 S F
      // (after the routed ones: the larger of the two).
      b.backward_workspace = {.replicated = 2.0 * cd + std::max(k * (4.0 * cd + 2.0 * fd), 2.0 * sf)};
      // ZB-H1: the routed and shared experts' inputs and SwiGLU products,
      // their outputs' gradients (C and 2F a row; C and 2 S F).
      b.deferred = {.split = cd + (cd + 2.0 * double(kv)),
                    .replicated = 2.0 * cd + 2.0 * cd + k * (2.0 * cd + 3.0 * fd) + cd + 3.0 * sf};
      // The rows gathered and weighted, SwiGLU on each row and on the shared
      // experts, the outputs added into their tokens.
      b.traffic = {.split = 4.0 * cd, .replicated = 8.0 * cd + k * (6.0 * fd + 6.0 * cd) + 6.0 * sf};
      b.tp_allreduce = cd;  // attention's alone: the mixture's output is whole already
      b.tp_allreduces = 1;
      b.ep_all_to_all = k * cd;  // dispatch the rows, combine the outputs
      b.ep_all_to_alls = 2;
      // One exchange's rows in flight: the rows sent and those received, and
      // their regrouped copy.
      b.ep_buffers = {.replicated = 3.0 * k * cd};
      b.ops = 12 + 8 + (shared_experts > 0 ? 3 : 0);  // attention's part; router, routing, gathers, combine
      b.expert_ops = 3;                               // gate_up, SwiGLU, down
    }
    TokenElements selective = none;
    selective.split -= cd;
    selective.f32_split = 0;
    b.saved = {none, selective, TokenElements{.replicated = cd}};
    s.layers.push_back(std::move(b));
  }
  s.layers.push_back(head_layer(vp, c, c, 1.0, /*shares_with=*/tie_embeddings ? 0 : -1));
  return s;
}

}  // namespace ht::models
