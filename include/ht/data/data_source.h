// ht::data::DataSource: where a training program's micro-batches come from.
//
// The engine (ht::train::Engine) asks a DataSource for micro-batches; what
// they hold is the program's business: token windows for a language model,
// feature vectors and labels for a classifier. A micro-batch is the first
// pipeline stage's input and the last stage's target, on the host (the
// engine moves them to the model's device).
//
// Every rank of the job draws every micro-batch of a step, in the same
// order, whatever its stage or tensor-parallel rank: a data source keeps its
// position in step on all ranks and needs no communication. attach() tells
// it which share of each global batch this rank trains on (its
// data-parallel rank among dp_size, micro_batch rows each): with the same
// seed a data source should give dp ranks disjoint rows whose union is what
// one process with micro_batch x dp_size rows would see, so any layout trains
// like one process on the same global batch.
//
// Its position is part of every checkpoint: state() is saved with the
// checkpoint and restore() gets it back on resume, so a resumed run sees the
// data it would have seen. Not thread-safe; called from the training thread.
#pragma once

#include <cstdint>

#include "ht/core/client_state.h"
#include "ht/core/tensor.h"

namespace ht::data {

struct MicroBatch {
  Tensor input;   // the first stage's input, e.g. tokens (B, T) i32
  Tensor target;  // the last stage's target, e.g. next tokens (B, T) i32
};

/// The share of each global batch a rank draws.
struct DataShard {
  int dp_rank = 0;
  int dp_size = 1;
  std::int64_t micro_batch = 1;  // rows per micro-batch on this rank
  std::uint64_t seed = 0;        // the run's seed
};

class DataSource {
 public:
  virtual ~DataSource() = default;

  /// Once, before any batch (the engine calls it when it starts).
  virtual void attach(const DataShard& shard) = 0;
  /// The next training micro-batch of this rank.
  virtual MicroBatch next() = 0;
  /// Whether validation() gives anything.
  virtual bool has_validation() const { return false; }
  /// Validation micro-batch `index` of this rank's share: the same batch
  /// for the same index on every pass. Throws kNotSupported by default.
  virtual MicroBatch validation(std::int64_t index);
  /// The position to save with a checkpoint, and to resume from.
  virtual ClientState state() const { return {}; }
  /// Throws kCorruption or kConfig when `state` is not one this source saved.
  virtual void restore(const ClientState& state) { (void)state; }
};

}  // namespace ht::data
