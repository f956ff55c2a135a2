// ht::plan search: the fastest layouts of a model on a world of ranks that
// fit in memory, by the memory and time models.
//
// Enumerates tp (dividing the model's sizes), pp (at most one stage per
// block), cp (sequences long enough to cut into 2 cp chunks of at least
// kMinContextChunk positions), dp (the rest), ep (for a mixture of experts:
// dividing dp and the experts), ZeRO stage 0-3 and shard group (all of dp, or the
// dp ranks of one node), micro-batch and accumulation giving the global
// batch, schedule and recomputation; pipeline stages are split by count and
// balanced by modelled time (the embedding counted with the first block, the
// head and loss with the last; uneven block counts allowed), both tried. A
// plan fits when its heaviest stage stays under the profile's memory less
// the safety margin. Plans rank by step time, then by peak memory.
// Deterministic: the same request gives the same plans on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/plan/memory_model.h"
#include "ht/plan/time_model.h"

namespace ht::plan {

/// The shortest chunk of a sequence the search splits it into under
/// context parallelism: one key tile of the attention op; shorter chunks
/// pay a collective per block for little work.
inline constexpr std::int64_t kMinContextChunk = 64;

struct PlanRequest {
  nn::ModelSpec model;
  MachineProfile profile;
  int world = 1;
  std::int64_t global_batch = 8;  // rows per optimizer step
  precision::Policy precision;
  /// Share of each rank's memory left free (allocator caching, fragmentation, the runtime's own).
  double memory_margin = 0.10;
  /// Restrictions (empty: all). Fixing tp and pp plans the rest for a mesh already built.
  std::vector<int> tp, pp, zero;
  /// Context-parallel sizes (empty: every size whose chunks of the
  /// sequence, 2 cp of them, hold at least kMinContextChunk positions, for
  /// a model with a kv_width; cp 1 otherwise).
  std::vector<int> cp;
  /// Expert-parallel sizes (empty: every size dividing dp and each mixture
  /// layer's experts; 1 for a dense model).
  std::vector<int> ep;
  std::vector<nn::Recompute> recompute;
  /// Pipeline schedules: 1F1B and GPipe unless given; interleaved (with
  /// `virtual_stages` chunks per rank) and ZB-H1 only when asked for (their
  /// modelled gain has not been measured on a cluster: docs/benchmarks.md).
  std::vector<parallel::Schedule> schedules;
  int virtual_stages = 2;
  std::int64_t max_micro_batch = 0;  // 0: no limit
  /// Throws kConfig naming a bad value.
  void validate() const;
};

struct Plan {
  LayoutChoice layout;
  std::vector<StageMemory> memory;
  TimeEstimate time;
  double peak_bytes = 0;  // the heaviest stage's
};

struct PlanResult {
  std::vector<Plan> plans;           // fitting plans, best first (at most `top`)
  std::vector<std::string> reasons;  // why the top plan wins, and what rules out the obvious others
  double budget_bytes = 0;           // memory per rank a plan may use
  std::int64_t considered = 0;       // layouts evaluated
  std::int64_t fitting = 0;          // of which fit in memory
  double search_ms = 0;
};

/// Throws kConfig when no layout fits (saying the smallest memory any needs
/// and what to change) or the request is malformed.
PlanResult search_plans(const PlanRequest& request, int top = 10);

/// Blocks per stage that balance modelled stage time (the embedding with the
/// first block, the head with the last) for `layout`'s tp, micro-batch and
/// recomputation: what search_plans tries beside the split by count.
std::vector<int> balanced_stage_layers(const nn::ModelSpec& model, const LayoutChoice& layout,
                                       const MachineProfile& profile);

/// The plans as a table for people: layout, micro-batch, recomputation,
/// per-stage memory (GiB), step time, tokens/s, bubble, communication share.
std::string format_plans(const PlanResult& result, const PlanRequest& request);
/// The result as JSON: {"model", "world", "global_batch", "profile",
/// "budget_gib", "plans": [{"layout": {...}, "stages": [...], "step_ms", ...}], "reasons": [...]}.
std::string plans_to_json(const PlanResult& result, const PlanRequest& request);

}  // namespace ht::plan
