// ht::data::DataSource: where a training program's samples come from.
//
// The engine (ht::train::Engine) owns the data position, counted in global
// samples (Megatron's consumed samples): a step of global batch G trains on
// samples [c, c + G), c being the samples the run consumed before it,
// whatever the layout. It splits them into micro-batches of B rows per
// data-parallel rank, dp ranks and k micro-batches per step (G = B k dp):
// micro-batch j of data-parallel rank d holds samples
//   c + (j dp + d) B ... c + (j dp + d + 1) B - 1,
// so micro-batch j of all dp ranks together is micro-batch j of one process
// with B dp rows. Every rank draws every micro-batch of its dp rank, in the
// same order, whatever its pipeline stage or tensor-parallel rank: no
// communication keeps the data in step.
//
// A source is random access (the default, and what a source should be when
// it can): samples(first, count) returns samples [first, first + count) as
// one micro-batch of count rows, and sample i depends only on i and the
// run's seed (attach), never on the layout, the micro-batch size or what
// was asked before. Every layout then trains on the same samples at the
// same steps, and a checkpoint resumes on any layout: the engine saves the
// consumed samples itself. Worked example: with G = 16, step 3 (1-based)
// reads samples [32, 48); under dp 2, B 4, k 2, rank 1's micro-batches are
// [36, 40) and [44, 48); one process with B 16 reads [32, 48) at once.
//
// A stream (random_access() false: a socket, a file read once) cannot seek.
// It gives each rank its next micro-batch (next(), B rows of its dp rank's
// share, attach() says which), keeps its own position (state() / restore()),
// and a checkpoint of it resumes only on the same data-parallel size and
// micro-batch size: the engine refuses any other by name, since the rows it
// would read next are not the ones the run would have read.
//
// Validation is random access in every source: validation_samples(first,
// count) are samples [first, first + count) of the validation set; the
// engine evaluates a fixed number of them (EngineOptions::eval_samples),
// spread over the data-parallel ranks, so the validation loss does not
// depend on the layout.
//
// Not thread-safe; called from the training thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ht/core/client_state.h"
#include "ht/core/tensor.h"

namespace ht::data {

/// The side input of document ids: (B, T) i32, the document each input
/// token of a row belongs to; a query attends only to keys of its own
/// document (ShardBatchesOptions::document_ids gives it; the GPT and Llama
/// attention layers read it).
inline constexpr std::string_view kDocumentIdsSide = "document_ids";

struct MicroBatch {
  Tensor input;   // the first stage's input, e.g. tokens (B, T) i32; rows along dimension 0
  Tensor target;  // the last stage's target, e.g. next tokens (B, T) i32
  /// Named tensors beside the input that layers read, on the host, rows
  /// along dimension 0: a padding mask "key_mask" (B, T) i32, 1 for a real
  /// token (nn::SelfAttention and ops::masked_mean read it); the document
  /// of each token, kDocumentIdsSide (nn::CausalSelfAttention and
  /// nn::SelfAttention mask attention across documents with it). The engine
  /// gives them to every pipeline stage's nn::Context as side inputs, on
  /// the model's device, before the stage's forward: they reach every
  /// stage whatever the layout (a model must not set side inputs in its
  /// own forward; see nn/context.h).
  std::map<std::string, Tensor> side;
  /// The global index of row 0's sample (set by the engine; keys dropout
  /// and anything else that must not depend on the layout).
  std::int64_t first_sample = 0;
  /// Rows (dimension 0 of the input).
  std::int64_t rows() const { return input.defined() && input.ndim() > 0 ? input.size(0) : 0; }
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

  /// Once, before any sample (the engine calls it when it starts): the run's
  /// seed, and, for a stream, this rank's share.
  virtual void attach(const DataShard& shard) { (void)shard; }

  /// Whether samples() can give any range (the default). A stream overrides
  /// it to return false, and implements next(), state() and restore().
  virtual bool random_access() const { return true; }
  /// Training samples [first, first + count) as one micro-batch of count
  /// rows (count >= 1), each a function of its index and the seed alone.
  /// Throws kNotSupported by default (a stream).
  virtual MicroBatch samples(std::int64_t first, std::int64_t count);

  /// Whether validation_samples() gives anything.
  virtual bool has_validation() const { return false; }
  /// Validation samples [first, first + count) as one micro-batch of count
  /// rows; the same for the same indices on every pass and every layout.
  /// Throws kNotSupported by default.
  virtual MicroBatch validation_samples(std::int64_t first, std::int64_t count);

  /// Streams only: this rank's next training micro-batch (the shard's
  /// micro_batch rows). Throws kNotSupported by default.
  virtual MicroBatch next();
  /// Streams only: the position to save with a checkpoint, and to resume from.
  virtual ClientState state() const { return {}; }
  /// Streams only. Throws kCorruption or kConfig when `state` is not one this source saved.
  virtual void restore(const ClientState& state) { (void)state; }
};

}  // namespace ht::data
