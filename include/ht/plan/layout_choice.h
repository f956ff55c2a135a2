// ht::plan::LayoutChoice: one way to run a model on a world of ranks — the
// mesh (tp x pp x dp), ZeRO stage and shard group, micro-batch and
// accumulation, pipeline schedule and split, recomputation, precision. What
// the memory and time models take and the search enumerates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/nn/model_spec.h"
#include "ht/parallel/schedule.h"
#include "ht/precision/policy.h"

namespace ht::plan {

struct LayoutChoice {
  int tp = 1, pp = 1, dp = 1;
  int zero = 0;
  int shard_group = 0;  // ranks per ZeRO shard group; 0: all of dp
  std::int64_t micro_batch = 1;
  int grad_accum = 1;  // micro-batches per step (the pipeline's m)
  parallel::Schedule schedule = parallel::Schedule::k1F1B;
  /// Model chunks per pipeline rank (the interleaved schedule; 1 otherwise).
  int virtual_stages = 1;
  nn::Recompute recompute = nn::Recompute::kNone;
  precision::Policy precision;
  /// Blocks per pipeline stage (model_stages() entries summing to the
  /// model's blocks; virtual stages under the interleaved schedule, rank r
  /// holding r, pp + r, ...); empty: by count (the first n % stages one more).
  std::vector<int> stage_layers;
  std::int64_t bucket_bytes = std::int64_t(25) << 20;

  int world() const { return tp * pp * dp; }
  /// The stages the model is split into: pp, or pp v virtual stages.
  int model_stages() const { return pp * virtual_stages; }
  /// Ranks one copy of the ZeRO state is sharded over.
  int shards() const { return zero == 0 ? 1 : (shard_group > 0 ? shard_group : dp); }
  std::int64_t global_batch() const { return micro_batch * grad_accum * dp; }
  /// "tp2 pp2 dp4 zero1/4 mb2 x4 1f1b selective" ("interleaved v2"): a compact name.
  std::string str() const;
};

/// Blocks of each stage: `stage_layers` if given, else by count.
std::vector<int> blocks_per_stage(const LayoutChoice& l, int num_blocks);

}  // namespace ht::plan
