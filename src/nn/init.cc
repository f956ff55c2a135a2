// ht::nn::Init: drawing a parameter's first values.
#include "ht/nn/init.h"

#include <algorithm>
#include <cmath>

#include "ht/core/fnv.h"
#include "ht/core/rng.h"
#include "ht/nn/parameter.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::nn {
namespace {

struct Fans {
  double in = 0, out = 0;
};

Fans fans_of(const Init& init, const Shape& shape, const std::string& name) {
  HT_CHECK(shape.size() >= 2, ErrorKind::kConfig,
           "parameter {} of shape {}: {} needs a fan-in and fan-out (2 or more dimensions); use normal() or "
           "uniform() for it",
           name, shape_str(shape), init.str());
  double receptive = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) receptive *= double(shape[d]);
  return {double(shape[1]) * receptive, double(shape[0]) * receptive};
}

// Fills v[0, count) with mean + std * N(0, 1) or low + (high - low) * U[0, 1)
// from the counter-based stream: blocks in parallel, the values of one pass.
void draw(float* v, std::int64_t count, std::uint64_t stream, bool normal, float shift, float scale) {
  constexpr std::int64_t kBlock = std::int64_t(1) << 16;
#pragma omp parallel for schedule(static) if (count > kBlock)
  for (std::int64_t b = 0; b < count; b += kBlock) {
    Rng rng(stream);
    rng.set_state(stream, (normal ? 2 : 1) * std::uint64_t(b));
    const std::int64_t e = std::min(count, b + kBlock);
    if (normal)
      for (std::int64_t i = b; i < e; ++i) v[i] = shift + scale * rng.normal();
    else
      for (std::int64_t i = b; i < e; ++i) v[i] = shift + scale * rng.uniform();
  }
}

}  // namespace

std::string Init::str() const {
  switch (kind) {
    case Kind::kZeros: return "zeros()";
    case Kind::kConstant: return fmt::format("constant({:g})", a);
    case Kind::kNormal: return fmt::format("normal(mean={:g}, std={:g})", a, b);
    case Kind::kUniform: return fmt::format("uniform({:g}, {:g})", a, b);
    case Kind::kXavierUniform: return fmt::format("xavier_uniform(gain={:g})", a);
    case Kind::kXavierNormal: return fmt::format("xavier_normal(gain={:g})", a);
    case Kind::kKaimingUniform: return fmt::format("kaiming_uniform(a={:g})", a);
    case Kind::kKaimingNormal: return fmt::format("kaiming_normal(a={:g})", a);
  }
  return "?";
}

Tensor init_full(const Init& init, const Shape& full_shape, const std::string& name, std::uint64_t seed) {
  Tensor host = Tensor::empty(full_shape, DType::kF32);
  float* v = host.data<float>();
  const std::int64_t count = host.numel();
  const std::uint64_t stream = seed ^ fnv1a(name);
  using K = Init::Kind;
  switch (init.kind) {
    case K::kZeros: std::fill(v, v + count, 0.f); break;
    case K::kConstant: std::fill(v, v + count, init.a); break;
    case K::kNormal: draw(v, count, stream, true, init.a, init.b); break;
    case K::kUniform: draw(v, count, stream, false, init.a, init.b - init.a); break;
    case K::kXavierUniform:
    case K::kXavierNormal: {
      const Fans f = fans_of(init, full_shape, name);
      const double std = double(init.a) * std::sqrt(2.0 / (f.in + f.out));
      if (init.kind == K::kXavierNormal) {
        draw(v, count, stream, true, 0.f, float(std));
      } else {
        const float bound = float(std * std::sqrt(3.0));
        draw(v, count, stream, false, -bound, 2 * bound);
      }
      break;
    }
    case K::kKaimingUniform:
    case K::kKaimingNormal: {
      const Fans f = fans_of(init, full_shape, name);
      const double std = std::sqrt(2.0 / ((1.0 + double(init.a) * init.a) * f.in));
      if (init.kind == K::kKaimingNormal) {
        draw(v, count, stream, true, 0.f, float(std));
      } else {
        const float bound = float(std * std::sqrt(3.0));
        draw(v, count, stream, false, -bound, 2 * bound);
      }
      break;
    }
  }
  return host;
}

Tensor Parameter::initial_value(std::uint64_t seed) const {
  Tensor full = init_full(init_, full_shape_, name_, seed);
  // The draws run in row-major order, so the real rows equal those of the
  // same matrix unpadded; the padding rows after them are zero.
  if (real_rows_ >= 0 && real_rows_ < full_shape_.at(0)) {
    const std::int64_t row = full.numel() / full_shape_.at(0);
    float* v = full.data<float>();
    std::fill(v + real_rows_ * row, v + full.numel(), 0.f);
  }
  return tp_part_of(std::move(full), layout_);
}

}  // namespace ht::nn
