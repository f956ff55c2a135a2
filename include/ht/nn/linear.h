// ht::nn::Linear: y = x W^T + b, W of shape (out, in) as in PyTorch.
//
// Tensor parallelism (Megatron): a column-parallel Linear holds rows of W
// (out / tp outputs each, bias split alike); its input is replicated and
// its backward sums the input gradient over the group. A row-parallel one
// holds columns of W (in / tp inputs each), takes the matching slice of the
// input, sums its output over the group and then adds the full, replicated
// bias. Column then row (attention, MLP) needs one sum in each direction.
#pragma once

#include "ht/nn/module.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::nn {

enum class LinearSplit { kNone, kColumn, kRow };

class Linear : public Module {
 public:
  /// Full feature counts; with a split, `tp` names the group and `parts` the
  /// stacked pieces of the split dimension (3 for a packed QKV projection).
  Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias, Device device,
         TensorParallel tp = {}, LinearSplit split = LinearSplit::kNone, int parts = 1);

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  /// Full feature counts.
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }
  /// Leaves the bias gradient to the caller, who fuses it with the op
  /// before (MLP: ops::gelu_backward_bias_grad), adds it and marks it ready
  /// itself: backward leaves db alone.
  void set_bias_grad_by_caller(bool by_caller);
  /// Leaves the input to the caller, who can compute it again: forward
  /// keeps nothing, and the caller saves the input under this Linear
  /// (ctx.save(&linear, {x})) before calling its backward. For an owner
  /// that recomputes it (an attention module's output projection under
  /// selective recomputation), so that the projection does not keep alive
  /// what the owner dropped.
  void set_input_saved_by_caller(bool by_caller) { input_saved_by_caller_ = by_caller; }

 protected:
  /// x (..., local in) -> y (..., local out); saves x (unless
  /// set_input_saved_by_caller). Without tensor
  /// parallelism and column-parallel, y starts as the bias in every row and
  /// the GEMM adds x W^T to it (beta 1: no pass zeroing y, none adding the
  /// bias after); row-parallel adds the bias after the sum over the group.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  /// dW += dy^T x (or = after Parameter::discard_grad), db += colsum(dy); returns dx = dy W.
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  std::int64_t in_, out_;
  TensorParallel tp_;
  LinearSplit split_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  bool bias_grad_by_caller_ = false;
  bool input_saved_by_caller_ = false;
};

}  // namespace ht::nn
