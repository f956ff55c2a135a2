// ht::nn::Dropout: the mask is drawn again from its keys, never kept.
#include "ht/nn/dropout.h"

#include "ht/core/fnv.h"
#include "ht/ops/dropout.h"

namespace ht::nn {
namespace {

// FNV-1a of the module's path: its dropout site, stable across layouts.
std::uint64_t site_of(const std::string& path) { return fnv1a(path); }

}  // namespace

Dropout::Dropout(std::string name, float p) : Module(std::move(name)), p_(p) {
  HT_CHECK(p >= 0.f && p < 1.f, ErrorKind::kConfig, "Dropout '{}': p = {} must be in [0, 1) (0 turns it off)",
           this->name(), p);
}

Tensor Dropout::forward_impl(Context& ctx, const Tensor& x) {
  if (!ctx.batch().training || p_ == 0.f) return x;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), MemCategory::kActivations);
  ops::dropout(x, p_, {.seed = ctx.batch().seed, .site = site_of(path()), .first_row = ctx.batch().first_sample}, y);
  return y;
}

Tensor Dropout::backward_impl(Context& ctx, const Tensor& dy) {
  // Linear in its input: the gradient goes through the forward's mask.
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device(), MemCategory::kActivations);
  if (!ctx.batch().training || p_ == 0.f)
    dx.copy_from(dy);
  else
    ops::dropout(dy, p_, {.seed = ctx.batch().seed, .site = site_of(path()), .first_row = ctx.batch().first_sample},
                 dx);
  return dx;
}

}  // namespace ht::nn
