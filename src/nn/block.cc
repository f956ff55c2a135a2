// ht::nn::Block.
#include "ht/nn/block.h"

#include "ht/ops/elementwise.h"

namespace ht::nn {

Block::Block(std::string name, std::int64_t dim, int n_head, Device device, TensorParallel tp, ContextParallel cp)
    : Module(std::move(name)) {
  ln_1_ = &add_module(std::make_unique<LayerNorm>("ln_1", dim, device));
  attn_ = &add_module(std::make_unique<CausalSelfAttention>("attn", dim, n_head, device, tp, cp));
  ln_2_ = &add_module(std::make_unique<LayerNorm>("ln_2", dim, device));
  mlp_ = &add_module(std::make_unique<MLP>("mlp", dim, 4 * dim, device, tp));
}

Tensor Block::forward_impl(Context& ctx, const Tensor& x) {
  Tensor a = attn_->forward(ctx, ln_1_->forward(ctx, x));
  ops::add(x, a, a);  // a = x + attn(ln_1(x))
  Tensor m = mlp_->forward(ctx, ln_2_->forward(ctx, a));
  ops::add(a, m, m);  // m = a + mlp(ln_2(a))
  return m;
}

Tensor Block::backward_impl(Context& ctx, const Tensor& dy) {
  // Each residual branch passes dy through unchanged and adds its own gradient.
  Tensor d = ln_2_->backward(ctx, mlp_->backward(ctx, dy));
  ops::add(d, dy, d);
  Tensor d2 = ln_1_->backward(ctx, attn_->backward(ctx, d));
  ops::add(d2, d, d2);
  return d2;
}

}  // namespace ht::nn
