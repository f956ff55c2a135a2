// ht::plan time model: one training step's time for a model spec, a layout
// and a machine profile.
//
// Compute, per micro-batch on each stage (per rank: its tp part): matmul
// FLOPs at the profile's GEMM rate (backward twice the forward), attention's
// core at its own rate (backward 2.5 times the forward: the fused kernel
// recomputes the probabilities), element-wise traffic at memory bandwidth
// (backward twice); recomputation adds the block's forward (full) or
// attention's core (selective) to backward. Tensor-parallel all-reduces are
// on the critical path (forward and backward). Communication uses ring
// formulas on the link a group spans (inside a node or across nodes, in the
// mesh's rank order: tp fastest, then dp, then pp):
//   all-reduce      2 (g - 1) / g x bytes / bandwidth + 2 (g - 1) latency
//   reduce-scatter  (g - 1) / g x bytes / bandwidth + (g - 1) latency (all-gather the same)
//   p2p             bytes / bandwidth + latency
//   all-to-all      (g - 1) / g x bytes / bandwidth + (g - 1) latency
// Mixtures of experts: a layer's routed experts and router run whole on
// every tp rank (their FLOPs are not divided by tp), and under expert
// parallelism each all-to-all (dispatch and combine in forward, the same in
// backward) moves top_k rows of the width per token over the ep group's
// link (inside a node when tp x ep ranks fit in one), on the critical path;
// the routed experts' gradients are reduced (and ZeRO-sharded, gathered)
// over the dp / ep ranks holding the same experts, the dense ones over dp.
// The pipeline: with stage times t_s (forward + backward of one
// micro-batch, with its transfers) and m micro-batches, a step takes
// sum_s t_s + (m - 1) max_s t_s (fill and drain through every stage, the
// rest paced by the slowest; GPipe and 1F1B alike), and the bubble is the
// share of that span a stage idles on average. Overlap: DDP and ZeRO-1/2
// gradient reductions run behind the last micro-batch's backward (only the
// part longer than it is exposed, and never less than the last bucket);
// ZeRO-1/2's all-gather of updated weights after the optimizer is exposed;
// ZeRO-3's gathers are prefetched behind the previous unit's compute. The
// optimizer streams its state at memory bandwidth.
#pragma once

#include <vector>

#include "ht/nn/model_spec.h"
#include "ht/plan/layout_choice.h"
#include "ht/plan/profile.h"

namespace ht::plan {

struct StageTime {
  double forward_ms = 0;   // one micro-batch, compute and tp all-reduces
  double backward_ms = 0;  // the same for backward (recomputation included)
  double tp_comm_ms = 0;   // of which tensor-parallel all-reduces (both directions)
  double p2p_ms = 0;       // pipeline transfers of one micro-batch (both directions)
  double cp_comm_ms = 0;   // of forward and backward: context parallelism's k/v gathers and reduce-scatters
  double ep_comm_ms = 0;   // of forward and backward: expert parallelism's all-to-alls
  double total_ms() const { return forward_ms + backward_ms + p2p_ms; }
};

struct TimeEstimate {
  std::vector<StageTime> stages;
  double pipeline_ms = 0;     // forward and backward of every micro-batch through the pipeline
  double bubble = 0;          // idle share of pipeline_ms (0 without a pipeline)
  double dp_comm_ms = 0;      // data-parallel / ZeRO traffic of one step, in all
  double dp_exposed_ms = 0;   // the part not hidden behind compute
  double optimizer_ms = 0;
  double step_ms = 0;
  double tokens_per_s = 0;    // the global batch's tokens over step_ms
  double comm_share = 0;      // (exposed dp + tp + p2p time) over step_ms, on the slowest stage
};

/// Throws kConfig when the layout does not fit the model (as estimate_memory).
TimeEstimate estimate_time(const nn::ModelSpec& model, const LayoutChoice& layout, const MachineProfile& profile);

/// The idle share of a pipeline step of `m` micro-batches over `p` stages
/// (`v` chunks a rank under the interleaved schedule), every stage taking
/// `forward_ms` and `backward_ms` a micro-batch, `weight_ms` of the backward
/// being the weight gradients (ZB-H1's W): from parallel::simulate over the
/// tables the executor runs (parallel::stage_actions), the costs in ticks of
/// 1/64 of a micro-batch, each transfer one tick. Steady-state runs are
/// extrapolated for large m and remembered per thread, so a search pays
/// for a few simulations. 0 for p <= 1.
double pipeline_bubble(parallel::Schedule schedule, int p, int m, int v, double forward_ms, double backward_ms,
                       double weight_ms);

/// Ring collective times in ms over `ranks` ranks on `link` for `bytes` each.
double all_reduce_ms(double bytes, int ranks, const Link& link);
double reduce_scatter_ms(double bytes, int ranks, const Link& link);  // also all-gather's
double p2p_ms(double bytes, const Link& link);
/// An all-to-all over `ranks` ranks on `link`, each rank holding `bytes`
/// for all of them (its own share stays): (g - 1) / g x bytes / bandwidth +
/// (g - 1) latency, the bus bandwidth as nccl-tests defines it for it.
double all_to_all_ms(double bytes, int ranks, const Link& link);

}  // namespace ht::plan
