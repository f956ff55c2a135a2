// ht::plan memory model.
#include "ht/plan/memory_model.h"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>

#include "ht/core/error.h"
#include "ht/parallel/schedule.h"
#include "ht/parallel/tables.h"

namespace ht::plan {
namespace {

double category_total(const std::array<double, kMemCategoryCount>& b) {
  return std::accumulate(b.begin(), b.end(), 0.0);
}

}  // namespace

double StageMemory::total() const { return category_total(bytes); }

int in_flight(parallel::Schedule schedule, int stage, int stages, int micro_batches, int virtual_stages) {
  // The search asks again for the same few tables across thousands of
  // layouts: each thread keeps the answers it computed.
  thread_local std::map<std::array<int, 5>, int> known;
  const std::array<int, 5> key{int(schedule), stage, stages, micro_batches, virtual_stages};
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const int peak =
      parallel::peak_in_flight(parallel::stage_actions(schedule, stage, stages, micro_batches, virtual_stages));
  known.emplace(key, peak);
  return peak;
}

std::vector<std::vector<int>> rank_chunks(const std::vector<std::vector<int>>& stage_layers, const LayoutChoice& l,
                                          int rank) {
  std::vector<std::vector<int>> out;
  for (int c = 0; c < l.virtual_stages; ++c) out.push_back(stage_layers.at(std::size_t(c * l.pp + rank)));
  return out;
}

double peak_bytes(const std::vector<StageMemory>& stages) {
  double peak = 0;
  for (const StageMemory& s : stages) peak = std::max(peak, s.total());
  return peak;
}

StateBytes state_bytes_per_parameter(int zero, int shards, const precision::Policy& p) {
  const double c = double(dtype_size(p.compute)), r = double(dtype_size(p.reduce));
  const double s = double(std::max(shards, 1));
  const double master = p.mixed() ? 4.0 : 0.0;
  const double full_grads = c + (p.compute != p.reduce ? r : 0.0);
  // What the data-parallel layer keeps (parallel::zero_buffers); the master
  // and AdamW's two moments are the shard (one shard without ZeRO).
  const parallel::ZeroBuffers keep = parallel::zero_buffers(zero);
  return {keep.whole_params ? c : c / s, keep.whole_grads ? full_grads : r / s, (8.0 + master) / (zero >= 1 ? s : 1.0)};
}

std::vector<std::vector<int>> layers_by_stage(const nn::ModelSpec& model, const LayoutChoice& l) {
  model.validate();
  const std::string problem = parallel::layout_problem(l);
  HT_CHECK(problem.empty(), ErrorKind::kConfig, "layout {}: {}", l.str(), problem);
  HT_CHECK(l.dp > 0, ErrorKind::kConfig, "layout {}: the planner needs the data-parallel size (dp > 0)", l.str());
  HT_CHECK(model.splits_over(l.tp), ErrorKind::kConfig, "{} does not split over tp {}", model.description, l.tp);
  const std::vector<int> blocks = l.layers_per_stage(model.num_blocks());
  const int n = l.model_stages();
  std::vector<std::vector<int>> stages(static_cast<std::size_t>(n));
  int next_block = model.first_block();
  for (int st = 0; st < n; ++st) {
    std::vector<int>& layers = stages[std::size_t(st)];
    if (st == 0)
      for (int i = 0; i < model.first_block(); ++i) layers.push_back(i);
    for (int i = 0; i < blocks[std::size_t(st)]; ++i) layers.push_back(next_block++);
    if (st == n - 1)
      for (int i = model.end_block(); i < int(model.layers.size()); ++i) layers.push_back(i);
  }
  return stages;
}

int expert_shards(const parallel::Layout& l) {
  if (l.ep <= 1) return l.shards();
  return l.zero == 0 ? 1 : l.dp * l.cp / l.ep;
}

double layer_params(const nn::ModelSpec& model, const std::vector<int>& stage_layers, int i, int tp, int ep) {
  const nn::LayerSpec& ls = model.layers[std::size_t(i)];
  double n = double(ls.params(tp)) + double(ls.expert_params(ep));
  if (ls.shares_with >= 0 &&
      std::find(stage_layers.begin(), stage_layers.end(), ls.shares_with) == stage_layers.end())
    n += double(ls.shared_params_split) / tp;
  return n;
}

namespace {

/// A rank's parameter elements, and its ZeRO-3 units (one per layer, in
/// execution order; a layer using another's weight on this stage gathers
/// that unit again).
struct RankParams {
  double params = 0;
  double expert = 0;          // of params, routed experts' (sharded over dp / ep)
  double shared_unit = 0;     // a unit whose weight a later layer of the stage uses too (GPT's wte)
  double tied_elsewhere = 0;  // a layer using a weight of another stage (the last stage's tied head)
  std::vector<double> units;      // each layer's gathered elements
  std::vector<double> own_units;  // each layer's own, the shared unit left out
};

RankParams rank_params(const nn::ModelSpec& model, const std::vector<int>& layers, int tp, int ep) {
  RankParams p;
  for (int i : layers) {
    const nn::LayerSpec& ls = model.layers[std::size_t(i)];
    const double n = layer_params(model, layers, i, tp, ep);
    p.expert += double(ls.expert_params(ep));
    const auto shared_at = std::find(layers.begin(), layers.end(), ls.shares_with);
    double gathered = n;
    if (ls.shares_with >= 0 && shared_at != layers.end()) {
      p.shared_unit = double(model.layers[std::size_t(ls.shares_with)].params(tp));
      gathered += p.shared_unit;
      // The shared unit's gradient is counted whole below, not as one in flight.
      p.own_units[std::size_t(shared_at - layers.begin())] = 0;
    }
    // Its gradient is reduced with the other stage's copy only when the
    // step's gradients are finished, so it stays whole all backward.
    const bool tied_across_stages = ls.shares_with >= 0 && shared_at == layers.end();
    if (tied_across_stages) p.tied_elsewhere += n;
    p.params += n;
    p.units.push_back(gathered);
    p.own_units.push_back(tied_across_stages ? 0.0 : n);
  }
  return p;
}

/// The most elements two consecutive units hold (the one computing, the next prefetched or in flight).
double largest_pair(const std::vector<double>& u) {
  double best = u.empty() ? 0.0 : u[0];
  for (std::size_t k = 0; k + 1 < u.size(); ++k) best = std::max(best, u[k] + u[k + 1]);
  return best;
}

/// Gradient bytes of a rank: the ZeRO stage's share, and the full-size
/// gradients ZeRO-2 and -3 write before they reduce-scatter them.
double gradient_bytes(const RankParams& p, const LayoutChoice& l, const StateBytes& per, const StateBytes& per_expert) {
  const double c = double(dtype_size(l.precision.compute)), r = double(dtype_size(l.precision.reduce));
  const bool converts = l.precision.compute != l.precision.reduce;
  double grads = per.grads * (p.params - p.expert) + per_expert.grads * p.expert;
  if (l.zero == 2) {
    // Backward writes each bucket's full gradients (compute dtype, and the
    // reduction dtype's copy when they differ) before its reduce-scatter,
    // and frees them once it has completed: an upper bound, every bucket's
    // at once (one bucket holds a small model's all; accumulation keeps
    // them for the whole step).
    grads += p.params * (c + (converts ? r : 0.0));
  } else if (l.zero == 3) {
    // Backward writes a unit's gradients (compute dtype) while the unit
    // after it in the forward order, whose backward came first, still
    // holds its own and their reduction-dtype copy: DataParallel drops
    // both once that reduce-scatter is done, when the first of this
    // unit's gradients is ready (it keeps one reduction in flight). A unit
    // whose weight a later layer uses too (the head's tied wte) gets its
    // gradient from that layer first and keeps it all backward, and so
    // does a layer tied to another stage's weight; their reduction copies
    // come last, once the other units' reductions are done. With
    // accumulation the compute-dtype gradients stay all step, and one
    // unit's reduction copy at a time comes on top.
    const double copy = converts ? r : 0.0;
    const double kept = p.shared_unit + p.tied_elsewhere;
    double writing = 0, largest = kept;
    for (std::size_t k = 0; k < p.own_units.size(); ++k) {
      const double before = k + 1 < p.own_units.size() ? p.own_units[k + 1] * (c + copy) : 0.0;
      writing = std::max(writing, p.own_units[k] * c + before);
      largest = std::max(largest, p.own_units[k]);
    }
    grads += l.grad_accum > 1 ? p.params * c + largest * copy : std::max(writing + kept * c, kept * (c + copy));
  }
  return grads;
}

/// One model chunk's activations per token: what its forward keeps, and the
/// peak of its backward sweep: before layer i's backward, everything up to i
/// is still kept and i's working set comes on top (with full recomputation,
/// i's whole forward again); the layers after i are freed (ZB-H1: but for
/// what B leaves for W, LayerSpec::deferred, until W).
struct ChunkActivations {
  double kept = 0, sweep_peak = 0;
};

ChunkActivations chunk_activations(const nn::ModelSpec& model, const std::vector<int>& chunk, const LayoutChoice& l) {
  const double c = double(dtype_size(l.precision.compute));
  const int mode = int(l.recompute);
  const bool zero_bubble = l.schedule == parallel::Schedule::kZeroBubbleH1;
  ChunkActivations a;
  std::vector<double> saved_of, held_of, workspace_of, deferred_of;
  for (int i : chunk) {
    const nn::LayerSpec& ls = model.layers[std::size_t(i)];
    const bool block = ls.role == nn::LayerRole::kBlock;
    const double saved = ls.saved[std::size_t(block ? mode : 0)].bytes(l.tp, c);
    double w = ls.backward_workspace.bytes(l.tp, c);
    // Full recomputation: the block's forward again, less its input (kept
    // already, and the same storage its first layer keeps). Selective
    // recomputes attention's output only once the MLP's backward is done
    // and its activations are freed: no higher peak.
    if (block && l.recompute == nn::Recompute::kFull) w += ls.saved[0].bytes(l.tp, c) - saved;
    saved_of.push_back(saved);
    held_of.push_back(ls.held.bytes(l.tp, c));
    workspace_of.push_back(w);
    deferred_of.push_back(zero_bubble ? ls.deferred.bytes(l.tp, c) : 0.0);
    a.kept += saved;
  }
  double remaining = a.kept;
  for (std::size_t i = saved_of.size(); i-- > 0;) {
    a.sweep_peak = std::max(a.sweep_peak, remaining + workspace_of[i]);
    remaining += deferred_of[i] - (saved_of[i] - held_of[i]);
  }
  a.sweep_peak = std::max(a.sweep_peak, remaining);  // the end of B, what W is to read
  return a;
}

/// The rank's activation peak per token: `in_flight` micro-batches of its
/// chunk kept and the newest one's backward sweep; interleaved, the chunks
/// in flight differ in size (the last holds the logits), so the rank's
/// table is walked: each forward adds its chunk's activations, each
/// backward peaks at its chunk's sweep and frees them.
double activation_peak(const std::vector<ChunkActivations>& chunks, const LayoutChoice& l, int stage, int in_flight) {
  if (chunks.size() == 1) return chunks[0].kept * (in_flight - 1) + chunks[0].sweep_peak;
  double held = 0, peak = 0;
  for (const parallel::Action& a : parallel::stage_actions(l.schedule, stage, l.pp, l.grad_accum, l.virtual_stages)) {
    const ChunkActivations& chunk = chunks[std::size_t(a.chunk)];
    if (a.kind == parallel::ActionKind::kForward) peak = std::max(peak, held += chunk.kept);
    if (a.kind == parallel::ActionKind::kBackward) {
      peak = std::max(peak, held - chunk.kept + chunk.sweep_peak);
      held -= chunk.kept;
    }
  }
  return peak;
}

}  // namespace

std::vector<StageMemory> estimate_memory(const nn::ModelSpec& model, const LayoutChoice& l) {
  const std::vector<std::vector<int>> stage_layers = layers_by_stage(model, l);
  const double c = double(dtype_size(l.precision.compute));
  // A context-parallel rank holds its 1/cp of each sequence's positions.
  const double tokens = double(l.micro_batch) * double(model.seq_len) / double(l.cp);
  const StateBytes per = state_bytes_per_parameter(l.zero, l.shards(), l.precision);
  // Routed experts: sharded over the dp / ep ranks holding the same ones.
  const StateBytes per_expert = state_bytes_per_parameter(l.zero, expert_shards(l), l.precision);
  std::vector<StageMemory> out;
  for (int st = 0; st < l.pp; ++st) {
    // The rank's layers: its one stage's, or its chunks' (interleaved), in order.
    const std::vector<std::vector<int>> chunks = rank_chunks(stage_layers, l, st);
    std::vector<int> layers;
    for (const std::vector<int>& chunk : chunks) layers.insert(layers.end(), chunk.begin(), chunk.end());
    StageMemory m;
    m.stage = st;
    m.first_block = model.num_blocks();
    for (int i : layers)
      if (model.layers[std::size_t(i)].role == nn::LayerRole::kBlock) {
        ++m.blocks;
        m.first_block = std::min(m.first_block, i - model.first_block());
      }
    const auto cat = [&](MemCategory k) -> double& { return m.bytes[std::size_t(k)]; };
    // Model state.
    const RankParams p = rank_params(model, layers, l.tp, l.ep);
    const double dense = p.params - p.expert;
    cat(MemCategory::kParameters) =
        per.params * dense + per_expert.params * p.expert + (l.zero >= 3 ? c * largest_pair(p.units) : 0.0);
    cat(MemCategory::kOptimizerState) = per.optim * dense + per_expert.optim * p.expert;
    cat(MemCategory::kGradients) = gradient_bytes(p, l, per, per_expert);
    // Activations: what the micro-batches in flight keep, the newest one's
    // backward sweep, and the activation received from the previous stage.
    m.in_flight = in_flight(l.schedule, st, l.pp, l.grad_accum, l.virtual_stages);
    std::vector<ChunkActivations> per_chunk;
    for (const std::vector<int>& chunk : chunks) per_chunk.push_back(chunk_activations(model, chunk, l));
    const double width = double(model.width) * c;
    const bool receives = st > 0 || chunks.size() > 1;
    cat(MemCategory::kActivations) = tokens * (activation_peak(per_chunk, l, st, m.in_flight) + (receives ? width : 0.0));
    // Context parallelism: a block's forward holds the whole sequence's
    // keys and values, and one more sequence-sized buffer while the second
    // is gathered (nn/context_parallel.h); backward holds less.
    if (l.cp > 1 && m.blocks > 0)
      cat(MemCategory::kActivations) += 3.0 * double(l.micro_batch) * double(model.seq_len) *
                                         double(model.kv_width) / l.tp * c;
    // The pipeline's transfer buffers (one micro-batch each way), and under
    // expert parallelism one all-to-all's buffers at a time (the largest).
    double exchange = 0;
    if (l.ep > 1)
      for (int i : layers) exchange = std::max(exchange, model.layers[std::size_t(i)].ep_buffers.bytes(l.tp, c));
    cat(MemCategory::kCommunication) = (l.pp > 1 ? 2.0 * tokens * width : 0.0) + tokens * exchange;
    out.push_back(m);
  }
  return out;
}

}  // namespace ht::plan
