// A group of parameters laid end to end in one flat buffer: a data-parallel
// gradient bucket, or a ZeRO-3 unit. Padded so that it divides into
// `shards` equal shards; this rank owns shard `shard_rank`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/comm/work.h"
#include "ht/nn/parameter.h"

namespace ht::parallel::detail {

struct FlatGroup {
  std::vector<nn::Parameter*> params;
  std::vector<std::int64_t> offsets;  // of each parameter in the flat buffer
  std::int64_t numel = 0;             // elements of all parameters
  std::int64_t padded = 0;            // numel rounded up to a multiple of shards
  int shards = 1, shard_rank = 0;
  /// Holds a weight tied across pipeline stages: reduced after backward.
  bool deferred = false;
  Device device;

  Tensor full_params;   // stages 0-2: always; stage 3: while gathered
  Tensor shard_params;  // this rank's shard: a view of full_params, or (stage 3) its own buffer
  Tensor full_grads;    // stages 0-1: always; stages 2-3: during a step's backward
  Tensor shard_grads;   // this rank's reduced shard: a view of full_grads, or (stages 2-3) its own buffer

  int ready = 0;        // parameters whose gradient is complete this step
  int gather_refs = 0;  // stage 3: modules using the gathered values now
  comm::WorkPtr gather_work, reduce_work;

  std::int64_t shard_numel() const { return padded / shards; }
  std::int64_t shard_begin() const { return std::int64_t(shard_rank) * shard_numel(); }

  /// Points every parameter's data (grad) at its place in full_params (full_grads).
  void bind_params();
  void bind_grads();
  /// Drops the parameters' views (so the flat buffer can be freed).
  void unbind_params();
  void unbind_grads();
};

/// Lays `params` out in a new group and copies their current values into
/// full_params (f32, on their device).
FlatGroup make_flat_group(std::vector<nn::Parameter*> params, int shards, int shard_rank);

}  // namespace ht::parallel::detail
