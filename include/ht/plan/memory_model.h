// ht::plan memory model: the bytes one rank of each pipeline stage holds at
// its step peak, by category, for a model spec and a layout. Computed per
// stage (the first holds the embedding, the last the head and the logits;
// 1F1B and ZB-H1 keep p - s micro-batches in flight on stage s, GPipe all
// m; ZB-H1's newest also keeps what its input-gradient pass leaves for the
// weight-gradient pass; under the interleaved schedule a rank is its v
// chunks, and it keeps min(v m, (v + 1) p - 1 - 2 s) chunk activations),
// never averaged over stages.
//
// Per category, with c the compute dtype's bytes, r the reduction dtype's,
// P the parameter elements this rank's stage holds (its tp part; a weight
// shared with another stage counted on each), S the ZeRO shard count. A
// mixture of experts' routed experts count 1/ep of theirs in P, and their
// S is dp / ep, the ranks holding the same experts (expert_shards); the
// router and shared experts are dense parameters:
//   parameters   c P, or c P / S at ZeRO-3 plus the two units gathered at
//                once (the one computing and the one prefetched);
//   gradients    ZeRO 0-1: c P, and r P more when c != r; ZeRO 2: the
//                compute-dtype buckets backward fills before each is
//                reduce-scattered (c P at most) and r P / S; ZeRO 3: one
//                unit's full gradient in each dtype and r P / S;
//   optimizer    AdamW's two f32 moments, and f32 master weights under
//                mixed precision: (8 + 4) P / S from ZeRO 1 (S = 1 at 0);
//   activations  what forward keeps (nn::ModelSpec's per-mode figures)
//                times the micro-batches in flight, plus the largest
//                backward working set (with full recomputation, one block's
//                whole forward again), plus the stage's received input;
//                under context parallelism for 1/cp of the positions, plus
//                one block's whole-sequence keys and values and a gather
//                buffer (3 x seq_len x kv_width / tp);
//                A mixture-of-experts layer keeps its routing and its
//                routed rows (tokens x top_k) through the experts' SwiGLU,
//                the same per rank whatever ep (balanced routing assumed);
//   communication  the pipeline's send and receive buffers of one
//                micro-batch's activations; under ep > 1 also one
//                all-to-all's send, receive and regrouped rows (the
//                largest layer's LayerSpec::ep_buffers).
// This is the allocator's accounting (ht/core/memory.h), so the bench
// compares the two category by category (docs/benchmarks.md).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ht/core/memory.h"
#include "ht/nn/model_spec.h"
#include "ht/plan/layout_choice.h"

namespace ht::plan {

struct StageMemory {
  int stage = 0;
  int first_block = 0, blocks = 0;  // block indices [first_block, first_block + blocks); interleaved: the
                                    // first of its chunks' blocks and how many (not contiguous)
  /// Bytes by ht::MemCategory (kParameters ... kOther).
  std::array<double, kMemCategoryCount> bytes{};
  int in_flight = 1;  // micro-batches (interleaved: micro-batch, chunk pairs) whose activations the stage holds at once

  double total() const;
  double of(MemCategory c) const { return bytes[std::size_t(c)]; }
};

/// The layers each stage runs (indices into model.layers, in order): the
/// first stage's prefix, the stage's blocks, the last stage's suffix; one
/// list per layout.model_stages() (the virtual stages under the interleaved
/// schedule). Throws kConfig when the layout does not fit the model (a size
/// not positive, a stage without a block, tp not dividing its sizes, an
/// interleaved layout outside the engine's limits).
std::vector<std::vector<int>> layers_by_stage(const nn::ModelSpec& model, const LayoutChoice& layout);
/// The layer lists of pipeline rank `rank`'s chunks, from layers_by_stage:
/// its stage, or its virtual stages rank, pp + rank, ... (interleaved).
std::vector<std::vector<int>> rank_chunks(const std::vector<std::vector<int>>& stage_layers, const LayoutChoice& l,
                                          int rank);
/// Parameter elements one tp rank of an ep group holds for layer `i` on a
/// stage running `stage_layers`: its own (routed experts: 1/ep of them), and
/// a copy of a weight it uses from a layer on another stage (GPT's head on
/// the last stage: wte).
double layer_params(const nn::ModelSpec& model, const std::vector<int>& stage_layers, int i, int tp, int ep = 1);

/// Ranks the routed experts' ZeRO state is sharded over: the dp / ep ranks
/// holding the same experts (cp is 1 under ep); shards() when ep is 1, and
/// 1 without ZeRO.
int expert_shards(const parallel::Layout& l);

/// Per stage, in stage order. Throws kConfig when the layout does not fit
/// the model (a stage without a block, tp not dividing its sizes).
std::vector<StageMemory> estimate_memory(const nn::ModelSpec& model, const LayoutChoice& layout);

/// Micro-batches a stage holds at once: parallel::peak_in_flight of the
/// stage's own schedule table (parallel::stage_actions, what the pipeline
/// executes), each (micro-batch, chunk) pair once for v > 1. GPipe holds all
/// m, 1F1B and ZB-H1 min(p - s, m), interleaved min(v m, (v + 1) p - 1 - 2 s).
int in_flight(parallel::Schedule schedule, int stage, int stages, int micro_batches, int virtual_stages = 1);

/// The heaviest stage's total.
double peak_bytes(const std::vector<StageMemory>& stages);

/// Bytes per parameter element the model state takes (parameters,
/// gradients, optimizer) at ZeRO stage `zero` with `shards` shards, at rest
/// after a step: what bench/parallel_memory.cc checks the allocator against.
struct StateBytes {
  double params = 0, grads = 0, optim = 0;
  double total() const { return params + grads + optim; }
};
StateBytes state_bytes_per_parameter(int zero, int shards, const precision::Policy& p);

}  // namespace ht::plan
