// ht::nn context parallelism: one sequence split over the ranks of a group
// (--cp), and attention over the whole of it.
//
// The sequence of T positions is cut into 2C chunks of L = T / 2C for C
// ranks, and rank r holds chunks r and 2C - 1 - r, side by side along
// dimension 1 (its tokens are (B, 2L), its activations (B, 2L, .)): under a
// causal mask a chunk late in the sequence attends to many keys and an early
// one to few, so the pairs balance the work (Megatron-Core's and Llama 3's
// split). Everything that acts per position runs unchanged on the local
// positions; what needs a position's index (learned or rotary position
// embeddings) asks ContextParallel for it, and attention is the one layer
// that crosses the split.
//
// Attention: keys and values are all-gathered over the group and each local
// chunk attends to the keys before it (the causal mask shifted by the
// chunk's start: AttentionOptions::causal_offset), or to all of them without
// a causal mask. An all-gather rather than a ring of k/v blocks merged by
// their log-sum-exp: with grouped-query heads k and v are H / KV times
// smaller than q, one collective a layer is simpler to get exactly right,
// and the attention op runs unchanged (Llama 3 trained with this form). The
// whole sequence's k and v are held for one layer's forward, never kept for
// backward. Backward needs no merge: with the forward's log-sum-exp (over
// all the keys) the attention backward splits exactly over blocks of keys,
// each adding its part of dq. So each rank's k and v are sent in turn to
// the others, every rank computes its queries' gradients for those keys,
// and the owner sums them in rank order: a rank holds two chunks' k, v and
// gradients at a time, and what it keeps for backward stays its own
// positions' share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ht/comm/communicator.h"
#include "ht/nn/tape.h"
#include "ht/ops/attention.h"

namespace ht::nn {

struct ContextParallel {
  /// The context-parallel group; null: no context parallelism (a group of one).
  comm::Communicator* group = nullptr;

  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  /// The sequence's chunk that half `half` (0 or 1) of rank `rank` of `ranks` holds.
  static int chunk_of(int rank, int half, int ranks) { return half == 0 ? rank : 2 * ranks - 1 - rank; }
  /// The chunk this rank's half `half` holds.
  int chunk(int half) const { return chunk_of(rank(), half, size()); }
  /// The first global position of half `half`, for `local_length` (2L)
  /// local positions.
  std::int64_t half_start(int half, std::int64_t local_length) const { return chunk(half) * (local_length / 2); }
  /// The global position of local position i of `local_length` (2L).
  std::int64_t position(std::int64_t i, std::int64_t local_length) const {
    const std::int64_t l = local_length / 2;
    return half_start(int(i / l), local_length) + i % l;
  }
};

class Context;

/// The side input `name` of `ctx` for a layer that reads it per position
/// (null when absent, or when `name` is empty), refused (kNotSupported,
/// naming `layer`, `what` and the input) under context parallelism, where
/// it would have to cross the sequence's split. `what`: "a key padding
/// mask", "document masking".
const Tensor* side_input_without_cp(const Context& ctx, const std::string& name, const ContextParallel& cp,
                                    const std::string& layer, std::string_view what);

/// This rank's two chunks of `x` (B, T, ...) along dimension 1, side by side
/// (B, 2L, ...), copied; x itself for a group of one. Throws kConfig when T
/// does not split into 2C chunks, naming T and what would.
Tensor context_chunks(const Tensor& x, const ContextParallel& cp);

/// The rows of a table indexed by position along dimension 0 (learned
/// position embeddings, a rotary table) for this rank's `t` positions, its
/// two chunks' rows side by side, copied; `table` itself for a group of one.
Tensor context_rows(const Tensor& table, const ContextParallel& cp, std::int64_t t);

/// Attention of this rank's two chunks over the whole sequence: q (B, 2L,
/// H*D), k and v (B, 2L, KV*D) -> out (B, 2L, H*D) and lse (B, H, 2L) f32,
/// as ops::attention_forward on the whole sequence would give for these
/// positions. options.causal_offset must be 0 (the chunks' own offsets are
/// taken); no key mask. A group of one: plain attention.
void context_parallel_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const ops::AttentionOptions& options, const ContextParallel& cp, Tensor& out,
                                        Tensor& lse);
/// dq, dk and dv (this rank's positions, overwritten) from dout and the
/// forward's inputs, out and lse; each rank's k and v sent to the others in
/// turn, their gradients summed back on it.
void context_parallel_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, const ops::AttentionOptions& options,
                                         const ContextParallel& cp, Tensor& dq, Tensor& dk, Tensor& dv);

/// The same on Vars, recorded on q's tape.
Var context_parallel_attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options,
                               comm::Communicator& cp);

}  // namespace ht::nn
