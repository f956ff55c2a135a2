// The layouts of the parallel layer as pure functions (numbers in, numbers
// out: no tensor, no communicator, no module), so that each is tested
// exhaustively on one core: which group a parameter joins, which elements a
// ZeRO shard holds, how hybrid sharding splits the data-parallel ranks, and
// which layers a pipeline stage runs. DataParallel, Pipeline and the models execute these tables.
//
// Worked example, the buckets and shards of five parameters of 30, 50, 20, 7
// and 3 elements (f32, bucket_bytes 200 = 50 elements), parameter 1 tied
// across pipeline stages:
//   assign_buckets: reverse registration order 4, 3, 2 -> 3+7+20 = 30 elements
//   (120 bytes, open), 1 is tied -> {1} alone, deferred, 0 -> 60 elements
//   (240 bytes) closes {4, 3, 2, 0}. Groups: {1} (deferred), {4, 3, 2, 0}.
//   flat_layout({3, 7, 20, 30}, 4 shards): offsets 0, 3, 10, 30; numel 60,
//   padded 60, 15 elements a shard. Shard 1 holds [15, 30): parameter 2's
//   elements [5, 20) as the shard's [0, 15) (a piece, not the whole).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ht::parallel {

// ---- groups of parameters -------------------------------------------------

/// Parameters laid end to end in one flat buffer: a gradient bucket (ZeRO
/// 0-2) or a ZeRO-3 unit. `params` are parameter indices (positions in the
/// model's registration order), in their order in the buffer.
struct ParamGroup {
  std::vector<int> params;
  /// Holds a weight tied across pipeline stages: its gradient is summed
  /// between stages after backward, so the group is reduced then, not from
  /// the grad-ready hooks.
  bool deferred = false;
  friend bool operator==(const ParamGroup&, const ParamGroup&) = default;
};

/// DDP and ZeRO-1/2 gradient buckets. `numels[i]` is parameter i's element
/// count in registration order; `isolated[i]` (empty: none) marks a weight
/// tied across pipeline stages. Walks the parameters in reverse registration
/// order (about the order their gradients become ready): an isolated one
/// becomes a group of its own, flagged deferred; the others join the open
/// bucket, which closes as soon as it holds at least `bucket_bytes`
/// (numel * element_bytes summed); a last, smaller bucket closes at the end.
/// Groups come in the order they close. Throws kConfig for bucket_bytes <= 0,
/// kInvalidArgument for element_bytes <= 0, a negative count, or an
/// `isolated` of another size than `numels`.
std::vector<ParamGroup> assign_buckets(std::span<const std::int64_t> numels, std::int64_t element_bytes,
                                       std::int64_t bucket_bytes, const std::vector<bool>& isolated = {});

/// ZeRO-3 units: one per module run in sequence (a GPT's top-level children).
struct UnitAssignment {
  /// The units, in order of first use; a unit is deferred when it holds an
  /// isolated parameter.
  std::vector<ParamGroup> units;
  /// For each module, the unit it gathers: its own, or, for a module all of
  /// whose parameters belong to an earlier unit (the head tied to the
  /// embedding), that unit.
  std::vector<int> unit_of_module;
};

/// `module_params[k]` lists module k's parameter indices, in the module's
/// order; `isolated` is indexed by parameter index (empty: none);
/// `module_names` (empty, or one per module) only name modules in errors.
/// A module whose parameters are all new makes a unit of them. Throws
/// kInvalidArgument for a module without parameters, one sharing only some
/// of its parameters with earlier units, a parameter listed twice by one
/// module, or a negative index.
UnitAssignment assign_units(const std::vector<std::vector<int>>& module_params, const std::vector<bool>& isolated = {},
                            const std::vector<std::string>& module_names = {});

// ---- a flat group's ZeRO shards ------------------------------------------

/// Where the members of one group lie in its flat buffer, padded with zeros
/// to a multiple of the shard count so that it divides into equal shards.
struct FlatLayout {
  std::vector<std::int64_t> offsets;  // of each member, in elements
  std::vector<std::int64_t> numels;   // of each member
  std::int64_t numel = 0;             // of all members together
  std::int64_t padded = 0;            // numel rounded up to a multiple of shards
  int shards = 1;

  /// Elements in each shard: padded / shards.
  std::int64_t shard_numel() const { return padded / shards; }
  /// Shard `shard_rank`'s elements are [shard_begin, shard_end) of the
  /// buffer. Throws kOutOfRange outside [0, shards).
  std::int64_t shard_begin(int shard_rank) const;
  std::int64_t shard_end(int shard_rank) const;
};

/// Members of `numels` elements each (any count >= 0, zero members allowed)
/// laid end to end over `shards` shards. Throws kInvalidArgument for
/// shards <= 0 or a negative count.
FlatLayout flat_layout(std::span<const std::int64_t> numels, int shards);

/// The part of one member that a shard holds.
struct ShardPiece {
  int member = 0;             // position in the group (FlatLayout::offsets[member])
  std::int64_t offset = 0;    // the piece's first element within the member
  std::int64_t begin = 0;     // the piece's elements within the shard: [begin, end),
  std::int64_t end = 0;       //   counted from shard_begin
  bool whole = false;         // the piece is the whole member
  std::int64_t numel() const { return end - begin; }
  friend bool operator==(const ShardPiece&, const ShardPiece&) = default;
};

/// The non-empty pieces of members that shard `shard_rank` holds, in buffer
/// order (the padding belongs to no piece; a member of 0 elements has no
/// piece anywhere). What the optimizer steps on: one slot per piece.
std::vector<ShardPiece> shard_pieces(const FlatLayout& layout, int shard_rank);

// ---- what a ZeRO stage keeps ---------------------------------------------------

/// The buffers a flat group keeps between steps at a ZeRO stage, each whole
/// on every data-parallel rank or as this rank's shard: the rule
/// DataParallel allocates by and the planner's memory model sums
/// (plan::state_bytes_per_parameter). The f32 master and the optimizer's
/// state are always the shard (at stage 0 there is one shard: the whole).
///   stage 0 (DDP): whole working copy, whole gradients
///   stage 1:       whole working copy, whole gradients
///   stage 2:       whole working copy, gradient shard (a bucket's whole
///                  gradients only from its backward to its reduce-scatter)
///   stage 3:       working-copy shard (gathered around each use), gradient shard
struct ZeroBuffers {
  bool whole_params = true;
  bool whole_grads = true;
  friend bool operator==(const ZeroBuffers&, const ZeroBuffers&) = default;
};

/// The row of the table above; throws kConfig for a stage outside 0-3.
ZeroBuffers zero_buffers(int stage);

// ---- hybrid sharding (MiCS / HSDP) -----------------------------------------

/// How one data-parallel rank shards and replicates ZeRO state. With
/// shard_group s (0: all of dp) and zero_stage > 0, state is sharded over
/// runs of s consecutive dp ranks and replicated across the dp / s runs:
///   dp 6, s 3, dp_rank 4: shard rank 1 of 3, replica rank 1 of 2;
///   shard group {3, 4, 5}, replica group {1, 4}.
/// With zero_stage 0 nothing is sharded: 1 shard, dp replicas (all of dp).
/// Communicator splits: the shard group is colour replica_rank, key
/// shard_rank; the replica group is colour shard_rank, key replica_rank.
struct HybridShard {
  int shards = 1;        // ranks one copy of the state is sharded over
  int shard_rank = 0;    // dp_rank % shards
  int replicas = 1;      // copies of the sharded state: dp_size / shards
  int replica_rank = 0;  // dp_rank / shards
  std::vector<int> shard_group;    // dp ranks of this rank's shard group, by shard rank
  std::vector<int> replica_group;  // dp ranks holding the same shard, by replica rank
  friend bool operator==(const HybridShard&, const HybridShard&) = default;
};

/// Throws kConfig as DataParallelOptions::validate does: zero_stage outside
/// 0-3, shard_group negative or not dividing dp_size (listing the choices),
/// shard_group > 0 with zero_stage 0; kInvalidArgument for dp_size <= 0 or
/// dp_rank outside [0, dp_size).
HybridShard hybrid_shard(int dp_size, int shard_group, int dp_rank, int zero_stage);

// ---- pipeline stages ---------------------------------------------------------

/// Contiguous layers over `stages` stages as boundaries b (stages + 1 of
/// them): stage s runs layers [b[s], b[s + 1]), b[0] = 0, b[stages] = n.

/// By count: the first n_layers % stages stages hold one layer more.
/// Throws kConfig for stages <= 0 or n_layers < stages (a stage without a
/// layer).
std::vector<int> partition_by_count(int n_layers, int stages);
/// Stage `stage`'s layers [first, second) under partition_by_count. Throws
/// kInvalidArgument for stages <= 0 or a stage outside [0, stages), then as
/// partition_by_count does.
std::pair<int, int> stage_range(int n_layers, int stage, int stages);

/// Chosen stages (Megatron's --decoder-first-pipeline-num-layers, DeepSpeed's
/// partition_method), in the form users type them (--stage-layers): `counts[s]`
/// layers on stage s. Returns their boundaries, the prefix sums:
///   {3, 5, 5, 3} -> {0, 3, 8, 13, 16}.
/// Empty in, empty out (by count). Throws kConfig naming the values when
/// there are not `stages` counts, a count is below 1, or the total passes int;
/// each error offers a valid value, the split by count of the layers the
/// counts add up to (the model's own count is not known here).
/// `virtual_stages` > 1: the pipeline is interleaved, `stages` = pp x
/// virtual_stages virtual stages (--pp x --virtual-stages), one count each,
/// and the errors speak of virtual stages; it changes nothing else.
std::vector<int> stage_boundaries(const std::vector<int>& counts, int stages, int virtual_stages = 1);
/// The inverse: the layers of each stage of `boundaries` ({0, 3, 8} -> {3, 5}).
std::vector<int> layers_per_stage(const std::vector<int>& boundaries);

/// Checks chosen `boundaries` of `n_layers` layers over `stages` stages:
/// stages + 1 entries, b[0] = 0, b[stages] = n_layers, strictly increasing
/// (every stage holds a layer at least). Empty boundaries (by count) pass
/// when partition_by_count accepts the sizes. Throws kConfig saying what is
/// wrong in layers per stage ("--stage-layers 3,5,5,3 sums to 16 layers but
/// the model has 15") with a valid choice (the split by count); for
/// stages <= 0 or n_layers < stages as partition_by_count does.
/// `virtual_stages` as for stage_boundaries: the errors name virtual stages
/// and pp x v.
void validate_boundaries(const std::vector<int>& boundaries, int n_layers, int stages, int virtual_stages = 1);
/// Stage `stage`'s layers [first, second) under `boundaries` (empty: by
/// count, the overload above): what models::GPT and models::Llama build
/// their stage from (nn::PipelineStage::boundaries). Throws kInvalidArgument
/// for a stage outside [0, stages), then as validate_boundaries does.
std::pair<int, int> stage_range(int n_layers, int stage, int stages, const std::vector<int>& boundaries);

/// By cost: `layer_costs[i] >= 0` in any integer unit (FLOPs, bytes, µs;
/// integers, so that ties are exact). Every stage gets at least one layer.
/// A stage is heavier than another when it costs more or, at equal cost,
/// holds more layers. Minimises the heaviest stage (so the largest stage
/// cost is the least possible); among those partitions maximises the
/// lightest; among those, earlier stages take as many layers as they can.
/// With equal costs this is partition_by_count's answer. O(stages * n * 128)
/// at worst: milliseconds for hundreds of layers and stages. Throws kConfig
/// as partition_by_count does, kInvalidArgument for a negative cost or a
/// total beyond int64.
std::vector<int> partition_by_cost(std::span<const std::int64_t> layer_costs, int stages);

/// The cost of each stage of `boundaries` (as returned above) over `layer_costs`.
std::vector<std::int64_t> stage_costs(std::span<const std::int64_t> layer_costs, std::span<const int> boundaries);

}  // namespace ht::parallel
