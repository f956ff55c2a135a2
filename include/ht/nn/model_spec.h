// ht::nn::ModelSpec: what a model declares about its layers, so that a plan
// (ht/plan) can size and time it on any layout without building it.
//
// A model is an ordered list of layers: a prefix the first pipeline stage
// runs (GPT's embedding), the blocks (the pipeline's units, recomputable),
// and a suffix the last stage runs (final norm, head, loss). Per layer, all
// per token of a micro-batch of the spec's sequence length:
//   - parameters, split over tensor-parallel ranks or replicated on each;
//   - forward matmul FLOPs (backward is counted as twice the forward), the
//     part that is attention's T-dependent core apart (its tiles run at
//     another rate than the big GEMMs, and selective recomputation re-runs it);
//   - what forward keeps for backward under each recomputation mode, in
//     compute-dtype elements and in 4-byte elements (statistics, token ids),
//     split or replicated;
//   - the working set its backward needs on top (activation gradients), and
//     its memory traffic (element-wise ops) in compute-dtype elements;
//   - the elements it all-reduces over the tensor-parallel group in forward
//     (as many again in backward).
// Bundled models give theirs (models::GPTConfig::spec, LlamaConfig::spec); a
// program's own model fills one in, layer by layer, for ht-plan and --auto.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ht::nn {

/// What forward keeps for backward (activation recomputation is keeping less).
enum class Recompute : std::uint8_t {
  kNone,       // everything backward reads
  kSelective,  // all but attention's core (its output and log-sum-exp are recomputed)
  kFull,       // only the block's input: backward re-runs the block's forward first
};
inline constexpr int kRecomputeModes = 3;

/// "none", "selective", "full".
const char* recompute_name(Recompute r);
/// Parses one of those names; throws kConfig naming the valid ones.
Recompute parse_recompute(const std::string& name);

/// Elements per token, by dtype and by how tensor parallelism divides them.
struct TokenElements {
  double split = 0;          // compute dtype, divided over tp
  double replicated = 0;     // compute dtype, whole on every tp rank
  double f32_split = 0;      // 4-byte (f32, i32), divided over tp
  double f32_replicated = 0; // 4-byte, whole on every tp rank

  /// Bytes per token on one of tp ranks, compute elements of `compute_bytes`.
  double bytes(int tp, double compute_bytes) const {
    return (split / tp + replicated) * compute_bytes + (f32_split / tp + f32_replicated) * 4.0;
  }
  TokenElements& operator+=(const TokenElements& o) {
    split += o.split, replicated += o.replicated, f32_split += o.f32_split, f32_replicated += o.f32_replicated;
    return *this;
  }
};

enum class LayerRole : std::uint8_t { kFirst, kBlock, kLast };

struct LayerSpec {
  std::string name;  // "embedding", "h.3", "head"
  LayerRole role = LayerRole::kBlock;
  std::int64_t params_split = 0;       // parameter elements divided over tp
  std::int64_t params_replicated = 0;  // parameter elements whole on every tp rank
  /// A weight of another layer this one uses (GPT's head: the embedding's
  /// wte): index into ModelSpec::layers, -1 none. On the same stage it is
  /// held once; on another stage this layer holds a copy of
  /// `shared_params_split` elements.
  int shares_with = -1;
  std::int64_t shared_params_split = 0;
  double gemm_flops = 0;       // forward matmul FLOPs per token, divided over tp
  double attention_flops = 0;  // forward FLOPs per token of attention's core, divided over tp
  /// Kept for backward per recomputation mode (Recompute's order).
  std::array<TokenElements, kRecomputeModes> saved;
  TokenElements backward_workspace;  // transient during this layer's backward
  TokenElements held;                // of `saved`, what stays until the stage's backward ends (the logits' gradient)
  /// Zero-bubble pipelines (ZB-H1): what the layer's input-gradient pass (B)
  /// leaves for its weight-gradient pass (W): the weight GEMMs' inputs (part
  /// of `saved`, kept past B) and their outputs' gradients. The rest of
  /// `saved` goes in B as usual.
  TokenElements deferred;
  TokenElements traffic;             // element-wise memory traffic of one forward
  double tp_allreduce = 0;           // compute elements per token all-reduced over tp in forward
  int tp_allreduces = 0;             // how many all-reduces that is (each pays the link's latency)
  int ops = 0;                       // ops (kernels) of one forward; backward runs about twice as many

  std::int64_t params(int tp) const { return params_split / tp + params_replicated; }
};

struct ModelSpec {
  std::string description;  // as nn::Model::describe() says it
  std::int64_t seq_len = 0;
  std::int64_t width = 0;  // elements per token sent between pipeline stages
  /// Elements per token of one block's attention keys (as many values):
  /// what context parallelism gathers over its ranks for each block. 0: the
  /// model does not run under context parallelism (the planner keeps cp 1).
  std::int64_t kv_width = 0;
  std::vector<LayerSpec> layers;
  /// Sizes a tensor-parallel size must divide (heads, key/value heads, vocabulary rows, hidden sizes).
  std::vector<std::int64_t> tp_divides;

  /// Index of the first block and one past the last.
  int first_block() const;
  int end_block() const;
  int num_blocks() const { return end_block() - first_block(); }
  /// Parameter elements of the whole model, shared weights once.
  std::int64_t num_parameters() const;
  /// Whether the model splits over `tp` ranks.
  bool splits_over(int tp) const;
  /// Throws kConfig naming what is wrong: no block, layers out of order
  /// (first, blocks, last), a shares_with index that is not an earlier layer.
  void validate() const;
};

}  // namespace ht::nn
