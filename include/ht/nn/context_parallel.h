// ht::nn context-parallel attention: one sequence split over the ranks of a
// group, attention over the whole of it.
//
// The sequence of T positions is cut into 2C chunks of L = T / 2C for C
// ranks, and rank r holds chunks r and 2C - 1 - r, side by side along
// dimension 1 (its q, k and v are (B, 2L, .)): under a causal mask a chunk
// late in the sequence attends to many keys and an early one to few, so the
// pairs balance the work (Megatron-Core's and Llama 3's split).
//
// Keys and values are all-gathered over the group and each local chunk
// attends to the keys before it (the causal mask shifted by the chunk's
// start: AttentionOptions::causal_offset), or to all of them without a
// causal mask; in backward the keys' and values' gradients are
// reduce-scattered back to their ranks. An all-gather rather than a ring of
// k/v blocks merged by their log-sum-exp: with grouped-query heads k and v
// are H / KV times smaller than q, one collective a layer is simpler to get
// exactly right, and the attention op runs unchanged (Llama 3 trained with
// this all-gather form). It holds every position's k and v for the layer,
// which a ring would not.
#pragma once

#include "ht/comm/communicator.h"
#include "ht/nn/tape.h"
#include "ht/ops/attention.h"

namespace ht::nn {

/// Attention of this rank's two chunks (see the top) over the whole
/// sequence, the sequence split over `cp`: q (B, 2L, H*D), k and v (B, 2L,
/// KV*D) -> (B, 2L, H*D), as nn::attention on the whole sequence would give
/// for these positions. options.causal_offset must be 0 (the chunks' own
/// offsets are taken). One rank: plain attention.
Var context_parallel_attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options,
                               comm::Communicator& cp);

}  // namespace ht::nn
