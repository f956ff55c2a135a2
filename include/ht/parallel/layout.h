// ht::parallel::Layout: how one training run is laid over its ranks, as one
// value — the mesh (tp x cp x pp x dp), ZeRO stage and shard group, the pipeline
// schedule, its virtual stages and stage split, and the batch a rank runs
// (micro-batch rows, micro-batches a step). The flags fill it, the engine
// runs it, the planner (plan::LayoutChoice adds recomputation and precision)
// enumerates and prices it, --auto chooses it, checkpoints record its name
// and the tests run it. layout_problem() is its one validation; name() is
// what it is called everywhere (a test's name, a checkpoint's run.layout):
//
//   Layout l{.tp = 2, .pp = 2, .dp = 2, .zero = 1};
//   l.name();  // "zero1_dp2_tp2_pp2_1f1b"
//   l.str();   // "tp2 pp2 dp2 zero1 mb1x1 1f1b"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/comm/mesh_shape.h"
#include "ht/parallel/schedule.h"

namespace ht::parallel {

struct Layout {
  int tp = 1, pp = 1;
  /// Data-parallel ranks; 0: the rest of the world (on_world, on_mesh).
  int dp = 0;
  /// Context-parallel ranks: each sequence split over cp ranks (nn/
  /// context_parallel.h); they hold the same parameters as the dp ranks do,
  /// so gradients are reduced and ZeRO state sharded over dp x cp.
  int cp = 1;
  /// Expert-parallel ranks: a mixture-of-experts layer's routed experts are
  /// split over runs of ep consecutive dp ranks (comm::DeviceMesh), so ep
  /// divides dp; the other parameters stay data-parallel over all of dp.
  int ep = 1;
  int zero = 0;         // ZeRO stage: 0 (DDP), 1, 2, 3
  int shard_group = 0;  // ranks per ZeRO shard group (hybrid sharding); 0: all of dp x cp
  std::int64_t micro_batch = 1;  // rows per micro-batch and data-parallel rank
  int grad_accum = 1;            // micro-batches per optimizer step (the pipeline's m)
  Schedule schedule = Schedule::k1F1B;
  /// Model chunks per pipeline rank (the interleaved schedule; 1 otherwise).
  int virtual_stages = 1;
  /// Layers per pipeline stage, one count >= 1 per model stage (pp, or
  /// pp x virtual_stages under the interleaved schedule, rank r holding
  /// virtual stages r, pp + r, ...), e.g. {3, 5, 5, 3} (--stage-layers);
  /// empty: by count (the first n % stages one layer more).
  std::vector<int> stage_layers;

  /// tp x cp x pp x dp.
  int world() const { return tp * cp * pp * dp; }
  /// The stages the model is split into: pp, or pp x virtual_stages.
  int model_stages() const { return pp * virtual_stages; }
  /// Ranks one copy of the ZeRO state is sharded over (1 without ZeRO).
  int shards() const { return zero == 0 ? 1 : (shard_group > 0 ? shard_group : dp * cp); }
  /// Rows per optimizer step over the world: micro_batch x grad_accum x dp.
  std::int64_t global_batch() const { return micro_batch * grad_accum * dp; }

  /// An identifier made of the fields: zero<z>[_sg<s>]_dp<d>_tp<t>[_cp<c>][_ep<e>]_
  /// pp<p>_<schedule>[_v<v>][_mb<rows>][_acc<m>][_stages<a>_<b>...], the optional
  /// parts where they differ from 1 (or are given); the schedule as gpipe,
  /// 1f1b, interleaved or zbh1. Distinct layouts have distinct names.
  std::string name() const;
  /// The compact form for people: "tp2 pp2 dp4 zero1/4 mb2x4 1f1b v2" (cp
  /// after tp and ep after dp when above 1; the shard group after the stage when it is not
  /// all of dp x cp; the schedule when pp > 1).
  std::string str() const;

  /// This layout on a world of `world_size` ranks: dp resolved (0: the rest
  /// of the world), validated. Throws kConfig when tp x cp x pp does not
  /// divide the world, a given dp does not fill it, or layout_problem finds a fault.
  Layout on_world(int world_size) const;
  /// The same checked against a mesh already split: tp, pp and cp must be
  /// the mesh's (kConfig naming them, otherwise), dp resolved to its dp.
  Layout on_mesh(const comm::MeshShape& mesh) const;
  /// Throws kConfig with layout_problem's text when it is not empty.
  void validate() const;

  /// stage_layers as stage boundaries (parallel::stage_boundaries; empty: by count).
  std::vector<int> stage_boundaries() const;
  /// The layers of each model stage for a model of `num_layers` layers:
  /// stage_layers when given (checked against the model), else by count.
  /// The one stage split of the engine and the planner. Throws kConfig as
  /// validate_boundaries and partition_by_count do.
  std::vector<int> layers_per_stage(int num_layers) const;

  friend bool operator==(const Layout&, const Layout&) = default;
};

/// What is wrong with `l`, in the flags' words ("--zero 4 is not a ZeRO
/// stage: choose 0, 1, 2 or 3"); empty when nothing is. Sizes (tp, cp, pp,
/// micro-batch, accumulation, virtual stages) must be >= 1 and dp >= 0; the
/// ZeRO stage 0-3, and a shard group >= 0 that needs a stage and divides dp x cp;
/// the schedule's own rules (schedule_problem); stage_layers empty or one
/// count >= 1 per model stage. The model's layer count is not known here:
/// layers_per_stage checks the counts against it.
std::string layout_problem(const Layout& l);

}  // namespace ht::parallel
