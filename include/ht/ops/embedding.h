// Token plus learned-position embedding, whole or vocabulary-parallel (each
// tensor-parallel rank holds a shard of the token table's rows). wte, wpe,
// out, dout, dwte and dwpe share one compute dtype, f32, f16 or bf16
// (ht/ops/compute_dtype.h); tokens are i32.
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"
#include "ht/ops/vocab_shard.h"

namespace ht::ops {

/// out (B, T, C) = wte[tokens] + wpe[0..T) ; tokens (B, T) i32, wte (V, C),
/// wpe (T_max >= T, C) or undefined for no position term. A token id outside
/// [0, V) throws kOutOfRange naming the id, its position and V.
///
/// With a shard, wte (V_local, C) holds rows [shard.start, shard.start +
/// V_local) of a vocabulary of shard.size ids: ids are checked against
/// [0, shard.size), and an id outside the shard contributes no wte row (its
/// out row is the wpe term, or zeros without wpe). Summing every shard's out,
/// with wpe passed to exactly one of them, gives the unsharded result. A shard
/// outside [0, shard.size) throws kInvalidArgument.
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out,
                       VocabShard shard = {});
/// dwte += scatter of dout by token; dwpe += sum of dout over the batch (if defined).
/// Deterministic: the same inputs give the same bits. With a shard (as in
/// forward, dwte (V_local, C)), tokens outside the shard scatter nothing into
/// dwte; dwpe is unchanged by sharding.
void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe, VocabShard shard = {});

}  // namespace ht::ops
