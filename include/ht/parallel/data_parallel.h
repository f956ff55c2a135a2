// ht::parallel::DataParallel: data parallelism and ZeRO stages 1-3 over the
// ranks of a DeviceMesh that hold the same parameters (the dp x cp group:
// the data-parallel ranks and, under context parallelism, the ranks that
// hold other positions of the same rows), for one rank's part of any
// nn::Model. "dp" below is that group.
//
// Parameters are laid end to end in flat groups, padded so that every group
// divides into equal shards:
//   stage 0 (DDP)  buckets of about bucket_bytes in reverse registration
//                  order; a bucket's gradient all-reduce starts from the
//                  grad-ready hook of its last parameter, overlapping the rest
//                  of backward; the optimizer steps on full tensors.
//   stage 1        the same all-reduce; the optimizer (state and master
//                  weights) steps on this rank's 1/s of every bucket, then the
//                  updated shards are all-gathered.
//   stage 2        as 1, but gradients are reduce-scattered: after the step's
//                  backward only this rank's gradient shard is kept.
//   stage 3        one group per unit (the model's direct children: for GPT
//                  the embedding, each block, the final norm, the head) holding
//                  only this rank's parameter shard; a unit is all-gathered
//                  just before its forward and again before its backward,
//                  freed after each, and the next unit is prefetched while the
//                  current one computes.
// Mixed precision: each group keeps an f32 master shard for the optimizer
// and a working copy in the compute dtype for forward and backward;
// gradients accumulate in the compute dtype and are converted to the
// reduction dtype for the reduction (see src/parallel/flat_group.h).
//
// Hybrid sharding (MiCS / HSDP): with shard_group s < dp, state is sharded
// over groups of s consecutive dp ranks and replicated across the dp / s
// groups: reduce-scatter inside the shard group, then all-reduce of the
// shard across replicas, and all-gathers stay inside the shard group.
//
// Routed experts under expert parallelism (mesh ep > 1; parameters marked
// ParamLayout::expert) are held by the edp group alone (the dp ranks with
// the same ep coordinate): they form groups of their own (buckets at
// stages 0-2; at stage 3 a unit's experts are a second group of the unit),
// whose gradients are reduced and whose state is sharded over edp. An
// expert's gradient on its rank already sums the tokens of the ep ranks
// that sent it rows, so it is averaged over edp and divided by ep: the
// mean over dp that a dense gradient gets.
//
// Gradients are averaged over dp. With gradient accumulation, call
// set_final_part(model) before the last micro-batch's backward only:
// earlier micro-batches accumulate locally and reduce nothing.
//
// A weight tied across pipeline stages (nn::Model::tied_weights: GPT's
// embedding on the first stage and the head's copy on the last) has its
// copies' gradients summed between those stages before its data-parallel
// reduction, and is counted and saved once (the later copies are marked
// ParamLayout::pp_tied_copy here).
#pragma once

#include <functional>

#include <cstdint>
#include <memory>
#include <unordered_set>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/nn/model.h"
#include "ht/optim/optimizer.h"
#include "ht/parallel/tables.h"
#include "ht/parallel/tied_weights.h"
#include "ht/precision/policy.h"

namespace ht::parallel {

namespace detail {
struct FlatGroup;
}

struct DataParallelOptions {
  int zero_stage = 0;
  /// Ranks per ZeRO shard group (hybrid sharding); 0: the whole dp x cp group.
  int shard_group = 0;
  /// Target gradient bucket size (stages 0-2).
  std::int64_t bucket_bytes = std::int64_t(25) << 20;
  /// Compute dtype of the working copies and gradients, and the dtype
  /// gradients are reduced and stepped in (f32 masters in every case).
  precision::Policy precision;

  /// Throws kConfig naming the bad value for a data-parallel size `dp`.
  void validate(int dp) const;
};

/// Timings of the last step's gradient reductions, for the overlap benchmark.
struct ReductionTimes {
  double backward_ms = 0;  // from the first set_final_part to finish_gradients()
  double exposed_ms = 0;   // finish_gradients() waiting for reductions still in flight
  int early_groups = 0;    // groups whose reduction had started when finish_gradients() was called
  int groups = 0;          // groups reduced in all
};

class DataParallel {
 public:
  /// Collective over the world (it splits the shard, replica and tied-weight
  /// groups). Takes over `model`'s parameters: moves their values into flat
  /// groups (keeping only this rank's shard at stage 3) and installs hooks.
  /// Values each parameter starts from, e.g. [seed](const nn::Parameter& p)
  /// { return p.initial_value(seed); }: needed for a model built with
  /// deferred storage (nn::Placement::defer_storage); without it the
  /// parameters' current values are taken.
  using InitialValues = std::function<Tensor(const nn::Parameter&)>;

  /// The model must be initialised first, or `initial_values` given, and
  /// must outlive this object.
  /// Throws kInvalidArgument naming the problem when ZeRO-3 meets a model
  /// with parameters outside its children, or when a declared tied weight is
  /// missing from a stage that should hold it.
  DataParallel(nn::Model& model, comm::DeviceMesh& mesh, const DataParallelOptions& options,
               InitialValues initial_values = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Before a step's first micro-batch: discards the gradients (the first
  /// contribution overwrites each; see nn::Parameter::discard_grad; ZeRO 2-3
  /// hold none between steps: each bucket's is allocated when backward first
  /// writes to it).
  void begin_step();
  /// The next backward through `part` is its last of the step: its
  /// parameters' gradients are complete when it ends, and their reductions
  /// may start. `part` is the model (the step's last micro-batch) or a child
  /// of it, while backwards through the other children go on accumulating
  /// (an interleaved pipeline's chunks). Until begin_step.
  void set_final_part(nn::Module& part);
  /// After the last backward: waits for the reductions, sums tied weights;
  /// afterwards the optimizer's slots hold the dp-averaged gradients.
  void finish_gradients();
  /// Every gradient this rank holds after finish_gradients: one tensor per
  /// group (its shard; padding included), what a loss scale divides. The
  /// slots' primary gradients count each element once over the mesh
  /// (optim::unscale_and_global_norm takes both).
  std::vector<Tensor> shard_gradients() const;
  /// What the optimizer updates: this rank's shard of every group, one slot
  /// per parameter piece (named "<param>" or "<param>[a:b]" for a piece).
  const std::vector<optim::Slot>& slots() const { return slots_; }
  /// After the optimizer step: refreshes the working copies from the master
  /// shards (converted; all-gathered at stages 1-2). Not after a skipped step.
  void after_step();

  /// Stage 3: gathers every unit (collective over the shard group) so the
  /// full values are readable until release_all(); no-ops otherwise.
  void gather_all();
  void release_all();

  const DataParallelOptions& options() const { return options_; }
  /// The dense parameters' shards and replicas (the experts' are over edp).
  int shards() const { return domains_[0].shards; }
  int replicas() const { return domains_[0].replicas; }
  const ReductionTimes& reduction_times() const { return times_; }

 private:
  /// The ranks that hold a group's parameters: the dp x cp group for
  /// dense ones (domain 0), the edp group for routed experts under ep > 1
  /// (domain 1). Shards, replicas and their communicators are per domain.
  struct Domain {
    comm::Communicator* group = nullptr;
    int shards = 1, shard_rank = 0, replicas = 1, replica_rank = 0;
    std::unique_ptr<comm::Communicator> shard_comm, replica_comm;
    float grad_scale = 1.f;  // after the average over `group`: 1 / ep for experts
  };
  void add_domain(comm::Communicator& group, int stage_rank_in_group, float grad_scale);
  int domain_of(const nn::Parameter& p) const;
  void build_groups();
  /// Which parameters share each flat group (parallel/tables.h); at stage 3
  /// also the module sequence and each module's unit.
  std::vector<ParamGroup> group_table(const std::vector<nn::Parameter*>& params);
  /// One flat group of `members`: its values, master, working copy and
  /// gradient buffers as the ZeRO stage and precision keep them.
  std::unique_ptr<detail::FlatGroup> make_group(const std::vector<nn::Parameter*>& members, bool deferred);
  std::vector<optim::Slot> make_slots() const;
  void install_zero2_hooks();
  void install_zero3_hooks();
  void on_grad_ready(std::size_t group, const nn::Parameter& p);
  void start_reduction(detail::FlatGroup& g);
  void acquire(std::size_t unit);
  void release(std::size_t unit);
  void prefetch(std::size_t unit);
  void ensure_grads(detail::FlatGroup& g);
  void free_reduced_grads();
  void drop_full_grads(detail::FlatGroup& g);

  nn::Model& model_;
  comm::DeviceMesh& mesh_;
  DataParallelOptions options_;
  InitialValues initial_values_;
  std::vector<Domain> domains_;
  std::unique_ptr<TiedWeights> tied_;  // split after the shard and replica groups
  std::vector<std::unique_ptr<detail::FlatGroup>> groups_;
  std::vector<optim::Slot> slots_;
  // Stage 3: the unit of each top-level module, in execution order, and
  // the groups of each unit (its dense parameters', then its experts').
  std::vector<nn::Module*> sequence_;
  std::vector<std::size_t> unit_of_;
  std::vector<std::vector<std::size_t>> unit_groups_;
  bool final_ = true;  // the whole model's last backward has begun (set_final_part(model))
  std::unordered_set<const nn::Parameter*> final_params_;  // of the parts set_final_part named this step
  ReductionTimes times_;
  double final_start_ = 0;
};

}  // namespace ht::parallel
