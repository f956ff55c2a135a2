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
//     (as many again in backward);
//   - for a mixture-of-experts layer: its routed experts' parameters (split
//     over expert-parallel ranks, whole on every tp rank), the FLOPs every
//     tp rank runs whole (router, shared experts, the top_k routed experts
//     a token goes through), and the rows its all-to-alls exchange.
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

  /// Mixture of experts (all 0 for a dense layer). The routed experts are
  /// not split over tp: every tp rank holds its experts whole and runs the
  /// layer on the same rows. Under expert parallelism (ep ranks) a rank
  /// holds experts / ep of them, and data parallelism reduces and shards
  /// their state over the dp / ep ranks holding the same ones; the router
  /// and shared experts are in params_replicated, data-parallel as usual.
  int experts = 0;                       // routed experts (ep must divide it)
  int top_k = 0;                         // of them, how many each token goes through
  std::int64_t params_expert = 0;        // parameter elements of all `experts` routed experts
  double gemm_flops_replicated = 0;      // forward matmul FLOPs per token, whole on every tp rank
  /// Compute elements per token each of the layer's all-to-alls over the
  /// ep group carries (top_k rows of the width: the dispatched rows, the
  /// combined outputs); of them (ep - 1) / ep leave the rank.
  double ep_all_to_all = 0;
  int ep_all_to_alls = 0;                // all-to-alls in forward (as many in backward)
  /// Transient under ep > 1: the all-to-alls' send and receive buffers
  /// (one exchange at a time), per token.
  TokenElements ep_buffers;
  int expert_ops = 0;                    // ops of one routed expert's forward (the rank runs experts / ep of them)

  std::int64_t params(int tp) const { return params_split / tp + params_replicated; }
  /// Routed-expert parameter elements one rank of `ep` holds.
  std::int64_t expert_params(int ep) const { return params_expert / ep; }
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
  /// What one token goes through: num_parameters() less the routed experts
  /// it is not sent to (experts - top_k of each mixture layer's).
  std::int64_t active_parameters() const;
  /// Whether the model splits over `tp` ranks.
  bool splits_over(int tp) const;
  /// The most routed experts of a layer (0: dense).
  int max_experts() const;
  /// Whether every mixture-of-experts layer's experts split over `ep` ranks
  /// (ep 1 always; ep > 1 only for a model with experts).
  bool splits_experts_over(int ep) const;
  /// Throws kConfig naming what is wrong: no block, layers out of order
  /// (first, blocks, last), a shares_with index that is not an earlier layer.
  void validate() const;
};

}  // namespace ht::nn
