// ht::nn context-parallel attention: k and v all-gathered, each local chunk
// attending to the keys before it, their gradients reduce-scattered back.
#include "ht/nn/context_parallel.h"

#include "ht/nn/functional.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/movement.h"

namespace ht::nn {
namespace {

Tensor activation(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, like.dtype(), like.device(), MemCategory::kActivations);
}

/// x's positions [start, start + length) along dimension 1, copied.
Tensor positions(const Tensor& x, std::int64_t start, std::int64_t length) {
  Shape shape = x.shape();
  shape[1] = length;
  Tensor out = activation(shape, x);
  ops::narrow(x, 1, start, out);
  return out;
}

/// The sequence's chunk of each rank's halves: rank r's first half is chunk
/// r, its second chunk 2C - 1 - r.
std::int64_t chunk_of(int rank, int half, int ranks) { return half == 0 ? rank : 2 * ranks - 1 - rank; }

/// Every rank's (B, 2L, D) side by side, rank-major (C, B, 2L, D), into the
/// sequence's order (B, 2CL, D); or back (to_ranks).
Tensor to_sequence(const Tensor& gathered, int ranks, std::int64_t l) {
  const std::int64_t b = gathered.size(1), d = gathered.size(3);
  Tensor seq = activation({b, 2 * ranks * l, d}, gathered);
  for (int r = 0; r < ranks; ++r) {
    const Tensor mine = gathered.slice(r, r + 1).view({b, 2 * l, d});
    for (int half = 0; half < 2; ++half) ops::narrow_into(positions(mine, half * l, l), 1, chunk_of(r, half, ranks) * l, seq);
  }
  return seq;
}
Tensor to_ranks(const Tensor& seq, int ranks, std::int64_t l) {
  const std::int64_t b = seq.size(0), d = seq.size(2);
  Tensor out = activation({ranks, b, 2 * l, d}, seq);
  for (int r = 0; r < ranks; ++r) {
    Tensor mine = out.slice(r, r + 1).view({b, 2 * l, d});
    for (int half = 0; half < 2; ++half) ops::narrow_into(positions(seq, chunk_of(r, half, ranks) * l, l), 1, half * l, mine);
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

/// Half `half` of this rank's queries: the keys it sees (a prefix of the
/// sequence under a causal mask) and the options that shift the mask.
struct ChunkView {
  std::int64_t keys;
  ops::AttentionOptions options;
};
ChunkView chunk_view(const ops::AttentionOptions& o, int rank, int half, int ranks, std::int64_t l) {
  const std::int64_t start = chunk_of(rank, half, ranks) * l;
  ChunkView c{2 * ranks * l, o};
  if (o.causal) {
    c.keys = start + l;
    c.options.causal_offset = start;
  }
  return c;
}

}  // namespace

Var context_parallel_attention(const Var& q, const Var& k, const Var& v, const ops::AttentionOptions& options,
                               comm::Communicator& cp) {
  HT_CHECK(options.causal_offset == 0, ErrorKind::kInvalidArgument,
           "context_parallel_attention: causal_offset {} given; each chunk's is its own", options.causal_offset);
  const int ranks = cp.size(), rank = cp.rank();
  if (ranks == 1) return attention(q, k, v, options);
  HT_CHECK(q.ndim() == 3 && q.size(1) % 2 == 0 && k.ndim() == 3 && k.size(1) == q.size(1) && v.shape() == k.shape(),
           ErrorKind::kShapeMismatch,
           "context_parallel_attention: q (B, 2L, H*D), k and v (B, 2L, KV*D) hold this rank's two chunks of L "
           "positions, got {}, {} and {}",
           shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  const std::int64_t l = q.size(1) / 2;
  const Tensor k_seq = all_gather_sequence(k.tensor(), cp, l), v_seq = all_gather_sequence(v.tensor(), cp, l);
  Tensor out = activation(q.shape(), q.tensor());
  std::vector<Tensor> saved{q.tensor(), k_seq, v_seq, out};
  for (int half = 0; half < 2; ++half) {
    const ChunkView c = chunk_view(options, rank, half, ranks, l);
    const Tensor q_half = positions(q.tensor(), half * l, l);
    Tensor o_half = activation(q_half.shape(), q_half);
    Tensor lse = Tensor::empty({q.size(0), options.n_head, l}, DType::kF32, q.device(), MemCategory::kActivations);
    ops::attention_forward(q_half, positions(k_seq, 0, c.keys), positions(v_seq, 0, c.keys), c.options, nullptr,
                           o_half, lse);
    ops::narrow_into(o_half, 1, half * l, out);
    saved.push_back(lse);
  }
  return q.tape().record(
      Tensor(out), {q, k, v}, std::move(saved),
      [options, rank, ranks, l, &cp](Context&, const Tensor& dy, const std::vector<Tensor>& s,
                                     const std::vector<bool>&) {
        const Tensor &q_all = s[0], &k_seq = s[1], &v_seq = s[2], &out = s[3];
        Tensor dq = activation(q_all.shape(), q_all);
        Tensor dk_seq = Tensor::zeros(k_seq.shape(), k_seq.dtype(), k_seq.device(), MemCategory::kActivations);
        Tensor dv_seq = Tensor::zeros(v_seq.shape(), v_seq.dtype(), v_seq.device(), MemCategory::kActivations);
        for (int half = 0; half < 2; ++half) {
          const ChunkView c = chunk_view(options, rank, half, ranks, l);
          const Tensor q_half = positions(q_all, half * l, l), k_keys = positions(k_seq, 0, c.keys),
                       v_keys = positions(v_seq, 0, c.keys);
          Tensor dq_half = activation(q_half.shape(), q_half), dk = activation(k_keys.shape(), k_keys),
                 dv = activation(v_keys.shape(), v_keys);
          ops::attention_backward(positions(dy, half * l, l), q_half, k_keys, v_keys, positions(out, half * l, l),
                                  s[std::size_t(4 + half)], c.options, nullptr, dq_half, dk, dv);
          ops::narrow_into(dq_half, 1, half * l, dq);
          // Add into the keys' prefix of the sequence's gradients.
          for (auto [grad, part] : {std::pair{&dk_seq, &dk}, std::pair{&dv_seq, &dv}}) {
            Tensor prefix = positions(*grad, 0, c.keys);
            ops::add(prefix, *part, prefix);
            ops::narrow_into(prefix, 1, 0, *grad);
          }
        }
        return std::vector<Tensor>{dq, reduce_scatter_sequence(dk_seq, cp, l), reduce_scatter_sequence(dv_seq, cp, l)};
      });
}

}  // namespace ht::nn
