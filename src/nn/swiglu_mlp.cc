// ht::nn::SwiGLUMLP.
#include "ht/nn/swiglu_mlp.h"

#include "ht/ops/silu.h"

namespace ht::nn {

SwiGLUMLP::SwiGLUMLP(std::string name, std::int64_t dim, std::int64_t hidden, Device device, TensorParallel tp)
    : Module(std::move(name)) {
  HT_CHECK(hidden > 0 && hidden % tp.size() == 0, ErrorKind::kConfig,
           "SwiGLU MLP '{}': the hidden size {} does not split over tensor-parallel size {}; choose --ffn divisible "
           "by --tp",
           this->name(), hidden, tp.size());
  gate_up_ = &add_module(
      std::make_unique<Linear>("gate_up", dim, 2 * hidden, /*bias=*/false, device, tp, LinearSplit::kColumn, 2));
  down_ = &add_module(std::make_unique<Linear>("down", hidden, dim, /*bias=*/false, device, tp, LinearSplit::kRow));
}

Tensor SwiGLUMLP::forward_impl(Context& ctx, const Tensor& x) {
  Tensor gu = gate_up_->forward(ctx, x);
  Shape shape = gu.shape();
  shape.back() /= 2;
  Tensor a = Tensor::empty(shape, gu.dtype(), gu.device());
  Tensor a2 = a.flatten_rows();
  ops::swiglu_forward(gu.flatten_rows(), a2);
  ctx.save(this, {gu});
  return down_->forward(ctx, a);
}

Tensor SwiGLUMLP::backward_impl(Context& ctx, const Tensor& dy) {
  Tensor da = down_->backward(ctx, dy);
  const Tensor& gu = ctx.saved(this).at(0);
  Tensor dgu = Tensor::empty(gu.shape(), gu.dtype(), gu.device());
  Tensor dgu2 = dgu.flatten_rows();
  ops::swiglu_backward(da.flatten_rows(), gu.flatten_rows(), dgu2);
  return gate_up_->backward(ctx, dgu);
}

}  // namespace ht::nn
