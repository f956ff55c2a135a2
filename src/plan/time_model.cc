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

TimeEstimate estimate_time(const nn::ModelSpec& model, const LayoutChoice& l, const MachineProfile& profile) {
  const std::vector<std::vector<int>> stage_layers = stage_layers_of(model, l);  // checks the layout
  const Rates& rates = profile.rates_for(l.precision.compute);
  const double c = double(dtype_size(l.precision.compute)), r = double(dtype_size(l.precision.reduce));
  const double tokens = double(l.micro_batch) * double(model.seq_len);
  // Every GEMM of a micro-batch has its tokens as rows (tp splits the columns).
  const double gemm_per_ms = rates.gemm_gflops_at(tokens) * 1e6, attn_per_ms = rates.attention_gflops * 1e6;
  const double bytes_per_ms = profile.memory_gbps * 1e6;
  const Link& tp_link = profile.link(l.tp);
  const Link& dp_link = profile.link(l.tp * l.dp);
  const Link& shard_link = profile.link(l.tp * l.shards());
  const Link& pp_link = profile.link(l.tp * l.dp * l.pp);
  const int m = l.grad_accum;

  TimeEstimate t;
  double slowest = 0, sum = 0;
  double compute_all = 0, weight_grads_all = 0;  // forward + backward, and its weight GEMMs (ZB-H1's W)
  double dp_exposed_worst = 0, dp_comm_worst = 0, optimizer_worst = 0, comm_worst = 0;
  const int v = l.virtual_stages;
  for (int stage = 0; stage < l.pp; ++stage) {
    std::vector<int> layers;  // the rank's: its stage's, or its chunks' (interleaved)
    for (const std::vector<int>& c : rank_chunks(stage_layers, l, stage)) layers.insert(layers.end(), c.begin(), c.end());
    StageTime st;
    double params = 0;  // this rank's stage, for the data-parallel traffic and the optimizer
    double largest_unit = 0;
    for (int i : layers) {
      const nn::LayerSpec& ls = model.layers[std::size_t(i)];
      const bool block = ls.role == nn::LayerRole::kBlock;
      const double gemm = tokens * ls.gemm_flops / l.tp / gemm_per_ms;
      const double attn = attn_per_ms > 0 ? tokens * ls.attention_flops / l.tp / attn_per_ms : 0.0;
      const double ew = tokens * ls.traffic.bytes(l.tp, c) / bytes_per_ms;
      // Each of the layer's all-reduces pays the latency; the bytes are split among them.
      const int n_ar = std::max(ls.tp_allreduces, 1);
      const double tp_ar = n_ar * all_reduce_ms(tokens * ls.tp_allreduce * c / n_ar, l.tp, tp_link);
      const double overhead = ls.ops * profile.op_overhead_us * 1e-3;
      const double fwd = gemm + attn + ew + tp_ar + overhead;
      double bwd = 2.0 * (gemm + ew + overhead) + kAttentionBackwardFactor * attn + tp_ar;
      if (block && l.recompute == nn::Recompute::kFull) bwd += fwd;
      if (block && l.recompute == nn::Recompute::kSelective) bwd += attn;
      st.forward_ms += fwd;
      st.backward_ms += bwd;
      weight_grads_all += gemm;  // dW costs the forward's GEMM again
      st.tp_comm_ms += 2.0 * tp_ar;
      const double n = layer_params(model, layers, i, l.tp);
      params += n;
      largest_unit = std::max(largest_unit, n);
    }
    const double act_bytes = tokens * double(model.width) * c;
    // Each chunk receives and sends a micro-batch's activations (and their
    // gradients, counted as the same link time), but virtual stage 0 and the last.
    if (l.pp > 1) st.p2p_ms = double(2 * v - (stage == 0 ? 1 : 0) - (stage == l.pp - 1 ? 1 : 0)) *
                              p2p_ms(act_bytes, pp_link);
    t.stages.push_back(st);
    compute_all += st.forward_ms + st.backward_ms;
    slowest = std::max(slowest, st.total_ms());
    sum += st.total_ms();

    // Data-parallel traffic of this stage's ranks.
    const int shards = l.shards(), replicas = l.dp / std::max(shards, 1);
    double comm = 0, exposed = 0;
    const double grads = params * r;
    if (l.dp > 1) {
      // Gradient reduction: behind the last micro-batch's backward only, in
      // groups (DDP and ZeRO-1/2 buckets; ZeRO-3 units), each paying the latency.
      const double groups = l.zero == 3 ? double(layers.size())
                                        : std::max(1.0, std::ceil(grads / double(l.bucket_bytes)));
      const double piece = grads / groups;
      const double one_group = l.zero == 0 || shards == 1
                                   ? all_reduce_ms(piece, l.dp, dp_link)
                                   : reduce_scatter_ms(piece, shards, shard_link) +
                                         all_reduce_ms(piece / shards, replicas, dp_link);
      const double reduce = groups * one_group;
      const double last_bucket = one_group;
      // ZeRO-3: two gathers of every unit per micro-batch (forward, backward),
      // prefetched behind any compute; the first unit's is never hidden.
      const double units = double(layers.size());
      const double gathers =
          l.zero == 3 ? 2.0 * m * units * reduce_scatter_ms(params * c / units, shards, shard_link) : 0.0;
      const double first_unit = l.zero == 3 ? reduce_scatter_ms(largest_unit * c, shards, shard_link) : 0.0;
      comm = reduce + gathers;
      // Both share the link: what cannot hide behind its window, or behind all compute together.
      const double ov = profile.comm_overlap;
      exposed = std::max({last_bucket + first_unit, reduce - ov * st.backward_ms,
                          reduce + gathers - ov * m * (st.forward_ms + st.backward_ms)});
      if (l.zero == 1 || l.zero == 2) {
        const double gather = reduce_scatter_ms(params * c, shards, shard_link);  // all-gather of updated weights
        comm += gather;
        exposed += gather;
      }
    }
    const double optimizer = params / (l.zero >= 1 ? shards : 1) * optimizer_bytes_per_element(l.precision) /
                             bytes_per_ms;
    dp_comm_worst = std::max(dp_comm_worst, comm);
    dp_exposed_worst = std::max(dp_exposed_worst, exposed);
    optimizer_worst = std::max(optimizer_worst, optimizer);
    comm_worst = std::max(comm_worst, exposed + m * (st.tp_comm_ms + st.p2p_ms));
  }
  // One micro-batch through every stage, then m - 1 at the slowest stage's
  // pace: a bubble of sum - slowest (1F1B, GPipe). Interleaved divides it by
  // v; ZB-H1 fills it with the weight gradients: (F + B - W) / (F + B + W)
  // of 1F1B's (the zero-bubble paper's), B + W being this model's backward.
  double fill = sum - slowest;
  if (l.schedule == parallel::Schedule::kInterleaved) fill /= double(v);
  if (l.schedule == parallel::Schedule::kZeroBubbleH1 && compute_all > 0)
    fill *= std::clamp((compute_all - 2.0 * weight_grads_all) / compute_all, 0.0, 1.0);
  t.pipeline_ms = fill + double(m) * slowest;
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
