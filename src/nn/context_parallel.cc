// ht::nn context parallelism: a sequence's chunks, and attention across them
// (k and v all-gathered, each local chunk attending to the keys before it,
// their gradients reduce-scattered back).
#include "ht/nn/context_parallel.h"

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
/// sequence's order (B, 2CL, D); or back (to_ranks).
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
Tensor to_ranks(const Tensor& seq, int ranks, std::int64_t l) {
  const std::int64_t b = seq.size(0), d = seq.size(2);
  Tensor out = activation({ranks, b, 2 * l, d}, seq);
  for (int r = 0; r < ranks; ++r) {
    Tensor mine = out.slice(r, r + 1).view({b, 2 * l, d});
    for (int half = 0; half < 2; ++half)
      ops::narrow_into(positions(seq, ContextParallel::chunk_of(r, half, ranks) * l, l), 1, half * l, mine);
  }
  return out;
}

Tensor all_gather_sequence(const Tensor& local, comm::Communicator& cp, std::int64_t l) {
  Tensor gathered = activation({cp.size(), local.size(0), local.size(1), local.size(2)}, local);
  Tensor flat = gathered.view({gathered.numel()});
  cp.all_gather(local.view({local.numel()}), flat)->wait();
  return to_sequence(gathered, cp.size(), l);
}

Tensor reduce_scatter_sequence(const Tensor& seq, comm::Communicator& cp, std::int64_t l) {
  const Tensor by_rank = to_ranks(seq, cp.size(), l);
  Tensor local = activation({seq.size(0), 2 * l, seq.size(2)}, seq);
  Tensor flat = local.view({local.numel()});
  cp.reduce_scatter(by_rank.view({by_rank.numel()}), flat, comm::ReduceOp::kSum)->wait();
  return local;
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
  // The whole sequence's k and v gradients from this rank's queries, key
  // chunk by key chunk: with the forward's log-sum-exp (over all the keys)
  // the backward splits exactly over blocks of keys, each adding its part of
  // dq, so no second sequence-sized gradient is ever held.
  Tensor dk_seq, dv_seq;
  {
    // Gathered again rather than kept from forward (see the top of the
    // header), and released before the reduce-scatter.
    const Tensor k_seq = all_gather_sequence(k, group, l), v_seq = all_gather_sequence(v, group, l);
    dk_seq = Tensor::zeros(k_seq.shape(), k_seq.dtype(), k_seq.device(), MemCategory::kActivations);
    dv_seq = Tensor::zeros(v_seq.shape(), v_seq.dtype(), v_seq.device(), MemCategory::kActivations);
    const std::int64_t chunks = 2 * cp.size();
    for (int half = 0; half < 2; ++half) {
      const std::int64_t mine = cp.chunk(half);
      const Tensor q_half = positions(q, half * l, l), dout_half = positions(dout, half * l, l),
                   out_half = positions(out, half * l, l), lse_half = positions(lse, half * l, l, 2);
      Tensor dq_half = Tensor::zeros(q_half.shape(), q_half.dtype(), q_half.device(), MemCategory::kActivations);
      // Under a causal mask the chunks after this one are masked whole, the
      // earlier ones visible whole, and this one is its own diagonal.
      const std::int64_t last = options.causal ? mine : chunks - 1;
      for (std::int64_t j = 0; j <= last; ++j) {
        ops::AttentionOptions block = options;
        block.causal = options.causal && j == mine;
        const Tensor k_block = positions(k_seq, j * l, l), v_block = positions(v_seq, j * l, l);
        Tensor dq_part = activation(q_half.shape(), q_half), dk_part = activation(k_block.shape(), k_block),
               dv_part = activation(v_block.shape(), v_block);
        ops::attention_backward(dout_half, q_half, k_block, v_block, out_half, lse_half, block, nullptr, dq_part,
                                dk_part, dv_part);
        ops::add(dq_half, dq_part, dq_half);
        for (auto [grad, part] : {std::pair{&dk_seq, &dk_part}, std::pair{&dv_seq, &dv_part}}) {
          Tensor rows = positions(*grad, j * l, l);
          ops::add(rows, *part, rows);
          ops::narrow_into(rows, 1, j * l, *grad);
        }
      }
      ops::narrow_into(dq_half, 1, half * l, dq);
    }
  }
  dk.copy_from(reduce_scatter_sequence(dk_seq, group, l));
  dk_seq = Tensor();
  dv.copy_from(reduce_scatter_sequence(dv_seq, group, l));
}

Var context_parallel_attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options,
                               comm::Communicator& group) {
  if (group.size() == 1) return attention(q, k, v, options);
  const ContextParallel cp{.group = &group};
  check_chunks(q.tensor(), k.tensor(), v.tensor(), options);
  Tensor out = activation(q.shape(), q.tensor());
  Tensor lse = Tensor::empty({q.size(0), options.n_head, q.size(1)}, DType::kF32, q.device(), MemCategory::kActivations);
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

}  // namespace ht::nn
