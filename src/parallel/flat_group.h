// A group of parameters laid end to end in one flat buffer: a data-parallel
// gradient bucket, or a ZeRO-3 unit. Padded so that it divides into
// `shards` equal shards; this rank owns shard `shard_rank`.
//
// Buffers, by precision (compute dtype c, reduction dtype r, both f32 when
// training in f32, where the copies marked "(f32: same)" are one buffer):
//   work_params   full, c: the values forward and backward read (parameters'
//                 data are views). Stages 0-2 always; stage 3 while gathered.
//   work_shard    stage 3: this rank's shard of work_params, c (what is gathered).
//   master        this rank's shard, f32: what the optimizer updates.
//                 (f32: a view of work_params, or work_shard at stage 3.)
//   work_grads    full, c: where backward accumulates (gradients are views).
//                 Stages 0-1 always; stages 2-3 during a step's backward.
//   reduce_grads  full, r: the reduction's input (f32: same as work_grads).
//   shard_grads   this rank's reduced shard, r: what the optimizer reads.
//                 Stages 0-1: a view of reduce_grads; stages 2-3 its own buffer.
#pragma once

#include <functional>

#include <cstdint>
#include <string>
#include <vector>

#include "ht/comm/work.h"
#include "ht/parallel/tables.h"
#include "ht/nn/parameter.h"

namespace ht::parallel::detail {

struct FlatGroup {
  std::vector<nn::Parameter*> params;
  FlatLayout layout;  // where each parameter lies, the padding, the shards
  int shard_rank = 0;
  DType compute = DType::kF32, reduce = DType::kF32;
  /// Holds a weight tied across pipeline stages: reduced after backward.
  bool deferred = false;
  /// The ranks holding it (DataParallel::Domain): 0 dense, 1 routed experts.
  int domain = 0;
  Device device;

  Tensor work_params, work_shard, master;
  Tensor work_grads, reduce_grads, shard_grads;

  int ready = 0;        // parameters whose gradient is complete this step
  int gather_refs = 0;  // stage 3: modules using the gathered values now
  comm::WorkPtr gather_work, reduce_work;

  /// Elements of the buffer (the parameters and the padding).
  std::int64_t padded() const { return layout.padded; }
  std::int64_t shard_numel() const { return layout.shard_numel(); }
  std::int64_t shard_begin() const { return layout.shard_begin(shard_rank); }
  /// Whether gradients change dtype on their way to the reduction.
  bool converts_grads() const { return compute != reduce; }

  /// Points every parameter's data (grad) at its place in work_params (work_grads).
  void bind_params();
  void bind_grads();
  /// Drops the parameters' views (so the flat buffer can be freed).
  void unbind_params();
  void unbind_grads();
};

/// Lays `params` out in a new group on `device`. Returns it with
/// `master_full` set to their values (f32, padded): `value_of(p)` for each
/// (any device; the current values, or initial ones for parameters without
/// storage). The caller derives the buffers its ZeRO stage keeps from it.
FlatGroup make_flat_group(std::vector<nn::Parameter*> params, int shards, int shard_rank, Device device,
                          const std::function<Tensor(const nn::Parameter&)>& value_of, Tensor& master_full);

}  // namespace ht::parallel::detail
