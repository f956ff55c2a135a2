// ht::nn::MoE: a mixture-of-experts feed-forward block (Mixtral's,
// DeepSeek's), dropless:
//
//   scores  = softmax(router(x)) or sigmoid(router(x))       (N, E)
//   chosen  = the top_k experts of each token by score (ties: the lower index)
//   weights = their scores, divided by their sum when `renormalize`
//   y       = sum over the chosen experts e of weight * expert_e(x)  [+ shared(x)]
//
// Each routed expert is a SwiGLU MLP of `hidden` (nn/swiglu_mlp.h), run on
// the rows of the tokens that chose it, in token order; the shared experts
// (`shared_experts` of them, DeepSeek's) are one SwiGLU MLP of
// shared_experts x hidden run on every token. The router is a Linear of E
// outputs without bias.
//
// Auxiliary losses, each added to the step's loss through its gradient
// (the reported loss is the model's own, as in Megatron-Core):
//   load balancing (Switch/GShard), aux_loss_coeff x E x sum_e f_e P_e, with
//     f_e the share of the N x top_k choices that went to expert e and P_e
//     the mean over tokens of e's probability (the scores, normalised over
//     the experts for sigmoid scores);
//   router z-loss (ST-MoE), z_loss_coeff x mean over tokens of
//     logsumexp(router(x))^2.
// And load balancing without a loss (DeepSeek-V3's), by bias_update_rate:
// a per-expert bias b is added to the scores to choose the top_k (the
// weights stay the scores' own), and after each optimizer step the trainer
// moves it by the rate towards balance, b_e += rate x sign(mean load - load
// of e), from the step's loads over all of the data-parallel ranks
// (update_expert_bias), so that every layout routes alike. The bias is
// state, not a parameter: the engine keeps it in checkpoints.
// Their gradients are multiplied by Context::aux_loss_grad_scale (the
// factor the model's mean loss takes), which must be set when a
// coefficient is not 0: the layer's backward starts from its output's
// gradient, which already carries that factor, not from a loss.
//
// Expert parallelism (an ExpertParallel group of ep ranks, E divisible by
// ep): each rank holds E/ep of the routed experts, named by global index,
// and routes its own tokens as above; the rows that chose each expert go
// to the expert's rank in one all-to-all with uneven splits (the counts
// exchanged first), each local expert runs once on the rows of every
// rank, in rank order, and the outputs come back the same way. Backward
// does the same with the gradients. The router, the shared experts and the
// auxiliary losses stay per rank, so routing, drops and losses are those
// of the rank's own tokens, whatever ep. The routed experts' parameters are
// marked ParamLayout::expert: data parallelism reduces them over the
// ranks that hold the same experts.
//
// What it does not do yet, refused by name: tensors other than f32 on the
// CPU (the routing and the combination run on the host), tensor
// parallelism inside the layer (under tp every tp rank runs the whole
// layer on the same rows). Dropless by default; a capacity factor drops
// choices per sequence (MoEOptions::capacity_factor).
#pragma once

#include <cstdint>
#include <vector>

#include "ht/nn/expert_parallel.h"
#include "ht/nn/linear.h"
#include "ht/nn/swiglu_mlp.h"

namespace ht::nn {

enum class RouterScore { kSoftmax, kSigmoid };

struct MoEOptions {
  std::int64_t dim = 0;     // the token's width
  std::int64_t hidden = 0;  // each routed expert's hidden width
  int experts = 0;          // E, routed experts
  int top_k = 2;
  RouterScore score = RouterScore::kSoftmax;
  /// The chosen experts' weights divided by their sum (Mixtral, DeepSeek-V3);
  /// false: the scores as they are (Switch).
  bool renormalize = true;
  /// Experts every token goes through besides its chosen ones (DeepSeek's
  /// shared experts), each of `hidden`; 0: none.
  int shared_experts = 0;
  float aux_loss_coeff = 0.f;
  float z_loss_coeff = 0.f;
  /// 0: dropless. Otherwise each expert takes at most
  /// ceil(capacity_factor x T x top_k / E) of a sequence's T x top_k token
  /// choices (an input (..., T, dim); a 2-d input is one sequence), in
  /// order of position and then of score; the rest are dropped: that
  /// choice adds nothing to the token's output (the weights are not
  /// renormalised again). A sequence's drops depend on it alone, so the
  /// same choices drop under every layout that keeps sequences whole (cp
  /// splits them: refused by the models that use it).
  float capacity_factor = 0.f;
  /// DeepSeek-V3's bias update speed (its gamma, 0.001); 0: no bias.
  float bias_update_rate = 0.f;

  /// Throws kConfig naming the bad value.
  void validate() const;
};

/// What the training backwards since the last take_step_load() routed: once
/// per micro-batch (a recomputed forward is not counted twice).
struct MoEStepLoad {
  std::vector<std::int64_t> tokens_per_expert;  // E counts, of the choices each expert took
  std::int64_t dropped = 0;                     // choices past an expert's capacity
  double aux_loss = 0, z_loss = 0;              // summed over the micro-batches (coefficients included)
  int micro_batches = 0;
};

/// What the newest forward routed.
struct MoERouting {
  std::vector<std::int64_t> tokens_per_expert;  // E counts of the choices taken; with drops they add up to N x top_k
  std::int64_t dropped = 0;                     // choices past an expert's capacity
  std::vector<std::int32_t> choice;             // N x top_k: each token's experts, in order of score
  float aux_loss = 0.f;                         // coefficient included
  float z_loss = 0.f;                           // coefficient included
};

/// One step of DeepSeek-V3's bias update: bias[e] += rate x sign(mean
/// load - tokens_per_expert[e]). What MoE::update_expert_bias applies, and
/// what the trainer applies to the copies of layers other ranks hold.
void balance_bias_step(std::vector<float>& bias, float rate, const std::vector<std::int64_t>& tokens_per_expert);

class MoE : public Module {
 public:
  /// Throws kConfig when ep does not divide the experts.
  MoE(std::string name, const MoEOptions& options, Device device, const ExpertParallel& ep = {});

  const MoEOptions& options() const { return options_; }
  const ExpertParallel& expert_parallel() const { return ep_; }
  Linear& router() { return *router_; }
  /// The routed experts this rank holds: [first_local_expert(), + local_experts()).
  int first_local_expert() const { return ep_.rank() * local_experts(); }
  int local_experts() const { return options_.experts / ep_.size(); }
  /// Routed expert `e` by global index; throws kOutOfRange when another
  /// rank of the expert-parallel group holds it.
  SwiGLUMLP& expert(int e);
  /// Null without shared experts.
  SwiGLUMLP* shared() { return shared_; }
  const MoERouting& last_routing() const { return routing_; }
  /// The experts' routing bias (E values; zeros unless bias_update_rate).
  const std::vector<float>& expert_bias() const { return bias_; }
  /// Replaces it (a resume); throws kShapeMismatch unless E values.
  void set_expert_bias(std::vector<float> bias);
  /// One step of DeepSeek-V3's update from the step's choices each expert
  /// took over the whole data-parallel group (E counts): every rank must
  /// give the same counts. Nothing when bias_update_rate is 0.
  void update_expert_bias(const std::vector<std::int64_t>& tokens_per_expert);
  /// The load since the last call, which starts it again (the engine's
  /// per-step report, train::ExpertLoad).
  MoEStepLoad take_step_load();

 protected:
  /// x (..., dim) -> (..., dim).
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  /// The routed experts' part of a forward (backward): `rows` holds the
  /// rows (row gradients) this rank routes, in global expert order, counts[e]
  /// of them for expert e; returns the experts' outputs (input gradients)
  /// for those rows, in the same order. `received` is what the exchange
  /// brought in: rows per (source rank, local expert), from the forward.
  Tensor run_experts(Context& ctx, const Tensor& rows, const std::vector<std::int64_t>& counts,
                     std::vector<std::int64_t>& received);
  Tensor experts_backward(Context& ctx, const Tensor& drows, const std::vector<std::int64_t>& counts,
                          const std::vector<std::int64_t>& received);

  MoEOptions options_;
  ExpertParallel ep_;
  Linear* router_;
  std::vector<SwiGLUMLP*> experts_;
  SwiGLUMLP* shared_ = nullptr;
  MoERouting routing_;
  MoEStepLoad step_load_;
  std::vector<float> bias_;
};

}  // namespace ht::nn
