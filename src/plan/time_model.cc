// ht::plan time model.
#include "ht/plan/time_model.h"

#include <algorithm>
#include <cmath>

#include "ht/core/error.h"
#include "ht/plan/memory_model.h"

namespace ht::plan {
namespace {

constexpr double kAttentionBackwardFactor = 2.5;
/// Bytes AdamW streams per parameter element it steps (f32 value, gradient,
/// two moments read and written, plus the 16-bit working copy under mixed
/// precision).
double optimizer_bytes_per_element(const precision::Policy& p) {
  return 4.0 * 2 + 4.0 + 8.0 * 2 + (p.mixed() ? double(dtype_size(p.compute)) : 0.0);
}

double link_ms(double bytes, double factor, int steps, const Link& link) {
  return factor * bytes / (link.gbps * 1e9) * 1e3 + double(steps) * link.latency_us * 1e-3;
}

}  // namespace

double all_reduce_ms(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  return link_ms(bytes, 2.0 * (ranks - 1) / ranks, 2 * (ranks - 1), link);
}

double reduce_scatter_ms(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  return link_ms(bytes, double(ranks - 1) / ranks, ranks - 1, link);
}

double p2p_ms(double bytes, const Link& link) { return bytes <= 0 ? 0 : link_ms(bytes, 1.0, 1, link); }

double all_to_all_ms(double bytes, int ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  return link_ms(bytes, double(ranks - 1) / ranks, ranks - 1, link);
}

namespace {

// A layout's rates on a machine, per millisecond, and its links.
struct Speeds {
  double tokens = 0;  // of a micro-batch: every GEMM's rows (tp splits the columns)
  double c = 0, r = 0;  // bytes of the compute and the reduction dtype
  double gemm_per_ms = 0, attn_per_ms = 0, bytes_per_ms = 0;
  const Link* tp = nullptr;
  const Link* cp = nullptr;
  const Link* dp = nullptr;
  const Link* shard = nullptr;
  const Link* pp = nullptr;
  const Link* ep = nullptr;
};

Speeds speeds_of(const nn::ModelSpec& model, const LayoutChoice& l, const MachineProfile& profile) {
  const Rates& rates = profile.rates_for(l.precision.compute);
  Speeds s;
  s.tokens = double(l.micro_batch) * double(model.seq_len) / double(l.cp);  // a cp rank's share
  s.c = double(dtype_size(l.precision.compute));
  s.r = double(dtype_size(l.precision.reduce));
  s.gemm_per_ms = rates.gemm_gflops_at(s.tokens) * 1e6;
  s.attn_per_ms = rates.attention_gflops * 1e6;
  s.bytes_per_ms = profile.memory_gbps * 1e6;
  // Rank order tp, cp, dp, pp: each group spans the axes inside it.
  s.tp = &profile.link(l.tp);
  s.cp = &profile.link(l.tp * l.cp);
  s.dp = &profile.link(l.tp * l.cp * l.dp);
  s.shard = &profile.link(l.tp * l.shards());
  s.pp = &profile.link(l.tp * l.cp * l.dp * l.pp);
  s.ep = &profile.link(l.tp * l.cp * l.ep);  // ep consecutive dp ranks
  return s;
}

// One rank's work on its layers for a micro-batch: forward, backward and
// tensor-parallel time, and what the data-parallel part and ZB-H1 need.
struct RankWork {
  StageTime st;
  double params = 0;        // the rank's parameters (data-parallel traffic, the optimizer)
  double expert = 0;        // of which routed experts' (reduced and sharded over dp / ep)
  int expert_units = 0;     // layers holding routed experts (ZeRO-3 gathers them apart)
  double largest_unit = 0;  // the largest layer's dense part (ZeRO-3's first gather)
  double largest_expert_unit = 0;  // and routed experts' part
  double weight_grads = 0;  // the weight gradients' GEMMs (ZB-H1's W)
};

RankWork rank_work(const nn::ModelSpec& model, const std::vector<int>& layers, const LayoutChoice& l,
                   const MachineProfile& profile, const Speeds& s) {
  RankWork w;
  for (int i : layers) {
    const nn::LayerSpec& ls = model.layers[std::size_t(i)];
    const bool block = ls.role == nn::LayerRole::kBlock;
    const double gemm = s.tokens * (ls.gemm_flops / l.tp + ls.gemm_flops_replicated) / s.gemm_per_ms;
    const double attn = s.attn_per_ms > 0 ? s.tokens * ls.attention_flops / l.tp / s.attn_per_ms : 0.0;
    const double ew = s.tokens * ls.traffic.bytes(l.tp, s.c) / s.bytes_per_ms;
    // Each of the layer's all-reduces pays the latency; the bytes are split among them.
    const int n_ar = std::max(ls.tp_allreduces, 1);
    const double tp_ar = n_ar * all_reduce_ms(s.tokens * ls.tp_allreduce * s.c / n_ar, l.tp, *s.tp);
    const int ops = ls.ops + (ls.experts > 0 ? ls.expert_ops * ls.experts / l.ep : 0);
    const double overhead = ops * profile.op_overhead_us * 1e-3;
    // Expert parallelism: the layer's all-to-alls over the ep group, in
    // forward and as many in backward (synchronous: not hidden).
    const double a2a = ls.ep_all_to_alls * all_to_all_ms(s.tokens * ls.ep_all_to_all * s.c, l.ep, *s.ep);
    // Context parallelism: each block's attention all-gathers k and v in
    // forward, and again in backward, where it reduce-scatters their
    // gradients (synchronous: not hidden).
    const double kv_gather = block && l.cp > 1
                                 ? reduce_scatter_ms(s.tokens * double(l.cp) * double(model.kv_width) / l.tp * s.c,
                                                     l.cp, *s.cp)
                                 : 0.0;
    const double fwd = gemm + attn + ew + tp_ar + overhead + 2.0 * kv_gather + a2a;
    double bwd = 2.0 * (gemm + ew + overhead) + kAttentionBackwardFactor * attn + tp_ar + 4.0 * kv_gather + a2a;
    w.st.cp_comm_ms += 6.0 * kv_gather;
    w.st.ep_comm_ms += 2.0 * a2a;
    if (block && l.recompute == nn::Recompute::kFull) w.st.ep_comm_ms += a2a;
    if (block && l.recompute == nn::Recompute::kFull) bwd += fwd;
    if (block && l.recompute == nn::Recompute::kSelective) bwd += attn + 2.0 * kv_gather;
    w.st.forward_ms += fwd;
    w.st.backward_ms += bwd;
    w.weight_grads += gemm;  // dW costs the forward's GEMM again
    w.st.tp_comm_ms += 2.0 * tp_ar;
    const double n = layer_params(model, layers, i, l.tp, l.ep);
    w.params += n;
    const double expert = double(ls.expert_params(l.ep));
    w.expert += expert;
    if (expert > 0) ++w.expert_units;
    w.largest_unit = std::max(w.largest_unit, n - expert);
    w.largest_expert_unit = std::max(w.largest_expert_unit, expert);
  }
  return w;
}

// The data-parallel traffic of one stage's ranks a step: all of it, and
// what is exposed (not hidden behind compute).
struct DataParallelTime {
  double comm = 0, exposed = 0;
};

DataParallelTime data_parallel_time(const LayoutChoice& l, const RankWork& w, double units,
                                    const MachineProfile& profile, const Speeds& s) {
  // The parameters' groups: the dense ones, held by every rank of dp x cp,
  // and the routed experts, held by the dp / ep ranks of the same experts
  // (their own buckets and ZeRO-3 units; the group spans as much of the
  // mesh, every ep-th dp rank).
  struct Group {
    double params, units;
    int holders, shards;
  };
  const int m = l.grad_accum;
  std::vector<Group> groups{{w.params - w.expert, units, l.dp * l.cp, l.shards()}};
  if (w.expert > 0) groups.push_back({w.expert, double(w.expert_units), l.dp * l.cp / l.ep, expert_shards(l)});
  double reduce = 0, gathers = 0, last_bucket = 0, first_unit = 0, updated = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const Group& gr = groups[g];
    if (gr.holders <= 1 || gr.params <= 0) continue;
    const int shards = gr.shards, replicas = gr.holders / std::max(shards, 1);
    const double grads = gr.params * s.r;
    // Gradient reduction: behind the last micro-batch's backward only, in
    // groups (DDP and ZeRO-1/2 buckets; ZeRO-3 units), each paying the latency.
    const double pieces = l.zero == 3 ? gr.units : std::max(1.0, std::ceil(grads / double(l.bucket_bytes)));
    const double piece = grads / pieces;
    const double one_piece = l.zero == 0 || shards == 1 ? all_reduce_ms(piece, gr.holders, *s.dp)
                                                        : reduce_scatter_ms(piece, shards, *s.shard) +
                                                              all_reduce_ms(piece / shards, replicas, *s.dp);
    reduce += pieces * one_piece;
    last_bucket = std::max(last_bucket, one_piece);
    if (l.zero == 3) {
      // Two gathers of every unit per micro-batch (forward, backward),
      // prefetched behind any compute; the first unit's is never hidden.
      gathers += 2.0 * m * gr.units * reduce_scatter_ms(gr.params * s.c / gr.units, shards, *s.shard);
      const double largest = g == 0 ? w.largest_unit : w.largest_expert_unit;
      first_unit += reduce_scatter_ms(largest * s.c, shards, *s.shard);
    }
    if (l.zero == 1 || l.zero == 2) updated += reduce_scatter_ms(gr.params * s.c, shards, *s.shard);
  }
  DataParallelTime t;
  t.comm = reduce + gathers;
  if (t.comm <= 0 && updated <= 0) return t;
  // Both share the link: what cannot hide behind its window, or behind all compute together.
  const double ov = profile.comm_overlap;
  t.exposed = std::max({last_bucket + first_unit, reduce - ov * w.st.backward_ms,
                        reduce + gathers - ov * m * (w.st.forward_ms + w.st.backward_ms)});
  // ZeRO-1/2's all-gather of updated weights after the optimizer.
  t.comm += updated;
  t.exposed += updated;
  return t;
}

}  // namespace

TimeEstimate estimate_time(const nn::ModelSpec& model, const LayoutChoice& l, const MachineProfile& profile) {
  const std::vector<std::vector<int>> stage_layers = layers_by_stage(model, l);  // checks the layout
  const Speeds s = speeds_of(model, l, profile);
  const int m = l.grad_accum, v = l.virtual_stages;
  TimeEstimate t;
  double slowest = 0, sum = 0;
  StageTime slow;            // the slowest stage's times
  double slow_weights = 0;   // and its weight GEMMs (ZB-H1's W)
  double dp_exposed_worst = 0, dp_comm_worst = 0, optimizer_worst = 0, comm_worst = 0;
  for (int stage = 0; stage < l.pp; ++stage) {
    std::vector<int> layers;  // the rank's: its stage's, or its chunks' (interleaved)
    for (const std::vector<int>& c : rank_chunks(stage_layers, l, stage)) layers.insert(layers.end(), c.begin(), c.end());
    RankWork w = rank_work(model, layers, l, profile, s);
    // Each chunk receives and sends a micro-batch's activations (and their
    // gradients, counted as the same link time), but virtual stage 0 and the last.
    if (l.pp > 1)
      w.st.p2p_ms = double(2 * v - (stage == 0 ? 1 : 0) - (stage == l.pp - 1 ? 1 : 0)) *
                    p2p_ms(s.tokens * double(model.width) * s.c, *s.pp);
    t.stages.push_back(w.st);
    if (w.st.total_ms() > slowest) slow = w.st, slow_weights = w.weight_grads;
    slowest = std::max(slowest, w.st.total_ms());
    sum += w.st.total_ms();
    const DataParallelTime dp = data_parallel_time(l, w, double(layers.size()), profile, s);
    const double optimizer = ((w.params - w.expert) / (l.zero >= 1 ? l.shards() : 1) +
                              w.expert / (l.zero >= 1 ? expert_shards(l) : 1)) *
                             optimizer_bytes_per_element(l.precision) / s.bytes_per_ms;
    dp_comm_worst = std::max(dp_comm_worst, dp.comm);
    dp_exposed_worst = std::max(dp_exposed_worst, dp.exposed);
    optimizer_worst = std::max(optimizer_worst, optimizer);
    comm_worst = std::max(comm_worst, dp.exposed + m * (w.st.tp_comm_ms + w.st.p2p_ms + w.st.cp_comm_ms + w.st.ep_comm_ms));
  }
  // The slowest stage paces the pipeline, busy m times its micro-batch's
  // time; its idle share is the schedule simulator's for the tables the
  // executor runs, every stage at the slowest's costs (its transfers split
  // between forward and backward), no second closed form.
  const double bubble = pipeline_bubble(l.schedule, l.pp, m, v, slow.forward_ms + slow.p2p_ms / 2,
                                        slow.backward_ms + slow.p2p_ms / 2, slow_weights);
  t.pipeline_ms = double(m) * slowest / (1.0 - bubble);
  // More ranks than cores: the rates were measured with every rank
  // computing at once, but a stage that waits gives its core to the others,
  // so the bubble is not lost time. Work-conserving, a node's cores finish
  // the ranks' work, m mean stages, no sooner than that, nor sooner than
  // the critical path at a core each.
  if (const double over = profile.oversubscription(); over > 1 && l.pp > 1)
    t.pipeline_ms = std::max(double(m) * sum / double(l.pp), t.pipeline_ms / over);
  t.bubble = l.pp > 1 ? 1.0 - double(m) * (sum / l.pp) / t.pipeline_ms : 0.0;
  t.dp_comm_ms = dp_comm_worst;
  t.dp_exposed_ms = dp_exposed_worst;
  t.optimizer_ms = optimizer_worst;
  t.step_ms = t.pipeline_ms + t.dp_exposed_ms + t.optimizer_ms;
  t.tokens_per_s = double(l.global_batch()) * double(model.seq_len) / (t.step_ms * 1e-3);
  t.comm_share = t.step_ms > 0 ? std::min(1.0, comm_worst / t.step_ms) : 0.0;
  return t;
}

}  // namespace ht::plan
