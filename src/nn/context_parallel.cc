// ht::nn context parallelism: a sequence's chunks, and attention across them
// (k and v all-gathered in forward, each local chunk attending to the keys
// before it; in backward each rank's k and v sent to the others in turn and
// their gradients summed back on it).
#include "ht/nn/context_parallel.h"

#include <utility>

#include "ht/nn/context.h"
#include "ht/nn/functional.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/movement.h"

namespace ht::nn {
namespace {

Tensor activation(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, like.dtype(), like.device(), MemCategory::kActivations);
}

/// x's elements [start, start + length) along `dim`, copied.
Tensor positions(const Tensor& x, std::int64_t start, std::int64_t length, int dim = 1) {
  return ops::narrow_copy(x, dim, start, length);
}

/// Every rank's (B, 2L, D) side by side, rank-major (C, B, 2L, D), into the
/// sequence's order (B, 2CL, D).
Tensor to_sequence(const Tensor& gathered, int ranks, std::int64_t l) {
  const std::int64_t b = gathered.size(1), d = gathered.size(3);
  Tensor seq = activation({b, 2 * ranks * l, d}, gathered);
  for (int r = 0; r < ranks; ++r) {
    const Tensor mine = gathered.slice(r, r + 1).view({b, 2 * l, d});
    for (int half = 0; half < 2; ++half)
      ops::narrow_into(positions(mine, half * l, l), 1, ContextParallel::chunk_of(r, half, ranks) * l, seq);
  }
  return seq;
}
Tensor all_gather_sequence(const Tensor& local, comm::Communicator& cp, std::int64_t l) {
  Tensor gathered = activation({cp.size(), local.size(0), local.size(1), local.size(2)}, local);
  Tensor flat = gathered.view({gathered.numel()});
  cp.all_gather(local.view({local.numel()}), flat)->wait();
  return to_sequence(gathered, cp.size(), l);
}

/// Rank `owner`'s k and v on every rank of the group: its own on it, sent
/// to the others (point to point: on the host, MPI's nonblocking broadcast
/// and reduce move a few MiB at a fraction of the speed of sends).
std::pair<Tensor, Tensor> owner_kv(const Tensor& k, const Tensor& v, int owner, comm::Communicator& group) {
  if (group.rank() == owner) {
    for (int r = 0; r < group.size(); ++r)
      if (r != owner) {
        group.send(k, r)->wait();
        group.send(v, r)->wait();
      }
    return {k, v};
  }
  Tensor k_owner = activation(k.shape(), k), v_owner = activation(v.shape(), v);
  group.recv(k_owner, owner)->wait();
  group.recv(v_owner, owner)->wait();
  return {k_owner, v_owner};
}

/// On `owner`, `part` becomes the sum over the group's ranks of their parts
/// (its own first, then the others' in rank order: a fixed order, so the
/// same bits every time); every other rank sends its part.
void sum_on_owner(Tensor& part, int owner, comm::Communicator& group) {
  if (group.rank() != owner) {
    group.send(part, owner)->wait();
    return;
  }
  Tensor received = activation(part.shape(), part);
  for (int r = 0; r < group.size(); ++r)
    if (r != owner) {
      group.recv(received, r)->wait();
      ops::add(part, received, part);
    }
}

/// The options for half `half` of this rank's queries against the whole
/// sequence's keys: under a causal mask shifted by the chunk's start, so the
/// keys after the chunk are masked (and the op skips them).
ops::AttentionOptions chunk_options(const ops::AttentionOptions& o, const ContextParallel& cp, int half,
                                    std::int64_t l) {
  ops::AttentionOptions c = o;
  if (o.causal) c.causal_offset = cp.half_start(half, 2 * l);
  return c;
}

/// The checks every entry point makes; returns L.
std::int64_t check_chunks(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionOptions& options) {
  HT_CHECK(options.causal_offset == 0, ErrorKind::kInvalidArgument,
           "context-parallel attention: causal_offset {} given; each chunk's is its own", options.causal_offset);
  HT_CHECK(q.ndim() == 3 && q.size(1) % 2 == 0 && k.ndim() == 3 && k.size(1) == q.size(1) && v.shape() == k.shape(),
           ErrorKind::kShapeMismatch,
           "context-parallel attention: q (B, 2L, H*D), k and v (B, 2L, KV*D) hold this rank's two chunks of L "
           "positions, got {}, {} and {}",
           shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  return q.size(1) / 2;
}

}  // namespace

Tensor context_chunks(const Tensor& x, const ContextParallel& cp) {
  if (cp.size() == 1) return x;
  HT_CHECK(x.ndim() >= 2, ErrorKind::kShapeMismatch,
           "context parallelism splits dimension 1 (the sequence); got a tensor of shape {}", shape_str(x.shape()));
  const std::int64_t t = x.size(1), chunks = 2 * cp.size();
  HT_CHECK(t % chunks == 0, ErrorKind::kConfig,
           "--cp {} splits each sequence into {} chunks (two per rank, for causal balance), but the sequence length {} "
           "is not a multiple of {}: choose a length divisible by {} (e.g. {}), or another --cp",
           cp.size(), chunks, t, chunks, chunks, (t / chunks + 1) * chunks);
  const std::int64_t l = t / chunks;
  Shape shape = x.shape();
  shape[1] = 2 * l;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device(), MemCategory::kOther);
  for (int half = 0; half < 2; ++half) ops::narrow_into(positions(x, cp.chunk(half) * l, l), 1, half * l, out);
  return out;
}

Tensor context_rows(const Tensor& table, const ContextParallel& cp, std::int64_t t) {
  if (cp.size() == 1) return table;
  Shape shape = table.shape();
  shape[0] = t;
  Tensor rows = Tensor::empty(shape, table.dtype(), table.device(), MemCategory::kOther);
  const std::int64_t l = t / 2;
  for (int half = 0; half < 2; ++half) {
    const std::int64_t start = cp.half_start(half, t);
    ops::narrow_into(table.slice(start, start + l), 0, half * l, rows);
  }
  return rows;
}

void context_parallel_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const ops::AttentionOptions& options, const ContextParallel& cp, Tensor& out,
                                        Tensor& lse) {
  if (cp.size() == 1) return ops::attention_forward(q, k, v, options, nullptr, out, lse);
  const std::int64_t l = check_chunks(q, k, v, options);
  const Tensor k_seq = all_gather_sequence(k, *cp.group, l), v_seq = all_gather_sequence(v, *cp.group, l);
  for (int half = 0; half < 2; ++half) {
    const Tensor q_half = positions(q, half * l, l);
    Tensor o_half = activation(q_half.shape(), q_half);
    Tensor lse_half = Tensor::empty({q.size(0), options.n_head, l}, DType::kF32, q.device(), MemCategory::kActivations);
    ops::attention_forward(q_half, k_seq, v_seq, chunk_options(options, cp, half, l), nullptr, o_half, lse_half);
    ops::narrow_into(o_half, 1, half * l, out);
    ops::narrow_into(lse_half, 2, half * l, lse);
  }
}

void context_parallel_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, const ops::AttentionOptions& options,
                                         const ContextParallel& cp, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (cp.size() == 1) return ops::attention_backward(dout, q, k, v, out, lse, options, nullptr, dq, dk, dv);
  const std::int64_t l = check_chunks(q, k, v, options);
  comm::Communicator& group = *cp.group;
  const int ranks = cp.size(), me = cp.rank();
  // One owner's keys and values at a time: each rank's k and v sent from
  // it, every rank's queries' gradients for them summed back on it.
  // With the forward's log-sum-exp (over all the keys) the backward splits
  // exactly over blocks of keys, each adding its part of dq, so a rank holds
  // two chunks' k, v and gradients at a time, never the whole sequence's.
  Tensor q_half[2], dout_half[2], out_half[2], lse_half[2], dq_half[2];
  for (int half = 0; half < 2; ++half) {
    q_half[half] = positions(q, half * l, l);
    dout_half[half] = positions(dout, half * l, l);
    out_half[half] = positions(out, half * l, l);
    lse_half[half] = positions(lse, half * l, l, 2);
    dq_half[half] = Tensor::zeros(q_half[half].shape(), q.dtype(), q.device(), MemCategory::kActivations);
  }
  for (int owner = 0; owner < ranks; ++owner) {
    const auto [k_owner, v_owner] = owner_kv(k, v, owner, group);
    // The owner's k and v gradients from this rank's queries, side by side.
    Tensor dkv_owner =
        Tensor::zeros({2, k.size(0), k.size(1), k.size(2)}, k.dtype(), k.device(), MemCategory::kActivations);
    Tensor dk_owner = dkv_owner.slice(0, 1).view(k.shape()), dv_owner = dkv_owner.slice(1, 2).view(v.shape());
    for (int key_half = 0; key_half < 2; ++key_half) {
      const std::int64_t key_chunk = ContextParallel::chunk_of(owner, key_half, ranks);
      const Tensor k_block = positions(k_owner, key_half * l, l), v_block = positions(v_owner, key_half * l, l);
      Tensor dk_block = Tensor::zeros(k_block.shape(), k.dtype(), k.device(), MemCategory::kActivations);
      Tensor dv_block = Tensor::zeros(v_block.shape(), v.dtype(), v.device(), MemCategory::kActivations);
      for (int half = 0; half < 2; ++half) {
        // Under a causal mask a later key chunk is masked whole, an earlier
        // one visible whole, and the query's own chunk is its diagonal.
        const std::int64_t query_chunk = cp.chunk(half);
        if (options.causal && key_chunk > query_chunk) continue;
        ops::AttentionOptions block = options;
        block.causal = options.causal && key_chunk == query_chunk;
        Tensor dq_part = activation(q_half[half].shape(), q), dk_part = activation(k_block.shape(), k),
               dv_part = activation(v_block.shape(), v);
        ops::attention_backward(dout_half[half], q_half[half], k_block, v_block, out_half[half], lse_half[half], block,
                                nullptr, dq_part, dk_part, dv_part);
        ops::add(dq_half[half], dq_part, dq_half[half]);
        ops::add(dk_block, dk_part, dk_block);
        ops::add(dv_block, dv_part, dv_block);
      }
      ops::narrow_into(dk_block, 1, key_half * l, dk_owner);
      ops::narrow_into(dv_block, 1, key_half * l, dv_owner);
    }
    sum_on_owner(dkv_owner, owner, group);
    if (owner == me) {
      dk.copy_from(dkv_owner.slice(0, 1));
      dv.copy_from(dkv_owner.slice(1, 2));
    }
  }
  for (int half = 0; half < 2; ++half) ops::narrow_into(dq_half[half], 1, half * l, dq);
}

Var context_parallel_attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options,
                               comm::Communicator& group) {
  if (group.size() == 1) return attention(q, k, v, options);
  const ContextParallel cp{.group = &group};
  Tensor out = activation(q.shape(), q.tensor());
  Tensor lse =
      Tensor::empty({q.size(0), options.n_head, q.size(1)}, DType::kF32, q.device(), MemCategory::kActivations);
  context_parallel_attention_forward(q.tensor(), k.tensor(), v.tensor(), options, cp, out, lse);
  return q.tape().record(
      Tensor(out), {q, k, v}, {q.tensor(), k.tensor(), v.tensor(), out, lse},
      [options, cp](Context&, const Tensor& dy, const std::vector<Tensor>& s, const std::vector<bool>&) {
        const Tensor &q_all = s[0], &k_all = s[1], &v_all = s[2];
        Tensor dq = activation(q_all.shape(), q_all), dk = activation(k_all.shape(), k_all),
               dv = activation(v_all.shape(), v_all);
        context_parallel_attention_backward(dy, q_all, k_all, v_all, s[3], s[4], options, cp, dq, dk, dv);
        return std::vector<Tensor>{dq, dk, dv};
      });
}

const Tensor* side_input_without_cp(const Context& ctx, const std::string& name, const ContextParallel& cp,
                                    const std::string& layer, std::string_view what) {
  const Tensor* input = name.empty() ? nullptr : ctx.side_input(name);
  HT_CHECK(cp.size() == 1 || input == nullptr, ErrorKind::kNotSupported,
           "attention '{}': {} ('{}') under context parallelism (--cp {}) is not supported: the input would have to "
           "cross the sequence's split. Train with --cp 1, or without it",
           layer, what, name, cp.size());
  return input;
}

}  // namespace ht::nn
