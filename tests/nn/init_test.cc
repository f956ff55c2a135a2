// nn::Init and the values it gives (init_full, Parameter::initial_value):
// drawn from (seed, name) alone, the same whatever the tensor-parallel layout
// (each part cut from the full tensor), with each kind's statistics; constant
// kinds exact; fan-based kinds refuse a shape without fans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ht/nn/init.h"
#include "ht/nn/parameter.h"
#include "ht/nn/tensor_parallel.h"
#include "test_util.h"

namespace ht::nn {
namespace {

struct Moments {
  double mean = 0, std = 0, min = 0, max = 0;
};

Moments moments(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  Moments m{0, 0, INFINITY, -INFINITY};
  for (float x : v) {
    m.mean += x;
    m.min = std::min(m.min, double(x));
    m.max = std::max(m.max, double(x));
  }
  m.mean /= double(v.size());
  for (float x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size()));
  return m;
}

TEST(Init, ValuesDependOnSeedAndNameOnly) {
  const std::string name = "h.0.attn.c_attn.weight";
  for (const Init& init : {Init::normal(0.02f), Init::uniform(-0.5f, 0.5f)}) {
    const Tensor a = init_full(init, {8, 16}, name, 7);
    ASSERT_EQ(a.shape(), (Shape{8, 16}));
    const std::vector<float> va = a.to_vector<float>();
    EXPECT_EQ(init_full(init, {8, 16}, name, 7).to_vector<float>(), va) << init.str();
    EXPECT_NE(init_full(init, {8, 16}, "h.1.attn.c_attn.weight", 7).to_vector<float>(), va) << init.str();
    EXPECT_NE(init_full(init, {8, 16}, name, 8).to_vector<float>(), va) << init.str();
    // Element i comes from fixed counters of the (seed, name) stream, so a
    // larger tensor of the same name starts with the same values: nothing
    // else (other parameters, their order) enters the draw.
    const std::vector<float> longer = init_full(init, {16, 16}, name, 7).to_vector<float>();
    EXPECT_EQ(std::vector<float>(longer.begin(), longer.begin() + std::ptrdiff_t(va.size())), va) << init.str();
  }
}

#if defined(_OPENMP)
// Tensors of several 2^16-element blocks are drawn block by block in
// parallel: the values are those of one sequential pass, whatever the threads.
TEST(Init, BlockParallelDrawsGiveTheSameValuesOnAnyThreadCount) {
  const Shape shape{3 * 65536 + 5};
  for (const Init& init : {Init::normal(1.f), Init::uniform(-1.f, 1.f)}) {
    std::vector<float> one, two;
    test::with_omp_threads(1, [&] { one = init_full(init, shape, "big", 3).to_vector<float>(); });
    test::with_omp_threads(2, [&] { two = init_full(init, shape, "big", 3).to_vector<float>(); });
    EXPECT_EQ(one, two) << init.str();
  }
}
#endif

// Under tensor parallelism a parameter's initial value is its part of the
// full tensor: the parts of every rank assemble to exactly what one process
// draws, and fans come from the full shape, not the part's.
TEST(Init, TensorParallelPartsAreCutFromTheFullTensor) {
  const Shape full{12, 8};
  const std::string name = "h.0.attn.c_attn.weight";
  const Init init = Init::kaiming_uniform(std::sqrt(5.f));
  const Tensor whole = init_full(init, full, name, 11);
  for (const ParamLayout base : {ParamLayout{.tp_split_dim = 0}, ParamLayout{.tp_split_dim = 1},
                                 ParamLayout{.tp_split_dim = 0, .tp_parts = 3}}) {
    for (int tp : {1, 2, 4}) {
      std::vector<Tensor> parts;
      ParamLayout l = base;
      l.tp_size = tp;
      for (int r = 0; r < tp; ++r) {
        l.tp_rank = r;
        Parameter p(name, full, Tensor::empty(tp_part_shape(full, l), DType::kF32), true);
        p.layout() = l;
        p.set_init(init);
        const Tensor v = p.initial_value(11);
        EXPECT_EQ(v.shape(), tp_part_shape(full, l));
        EXPECT_EQ(v.to_vector<float>(), tp_part_of(whole, l).to_vector<float>())
            << "split dim " << l.tp_split_dim << ", parts " << l.tp_parts << ", rank " << r << " of " << tp;
        parts.push_back(v);
      }
      EXPECT_EQ(tp_assemble(parts, l).to_vector<float>(), whole.to_vector<float>())
          << "split dim " << l.tp_split_dim << ", parts " << l.tp_parts << ", tp " << tp;
    }
  }
  // A parameter without storage (deferred) has the same initial value.
  Parameter deferred(name, full, Tensor(), true);
  deferred.set_init(init);
  EXPECT_EQ(deferred.initial_value(11).to_vector<float>(), whole.to_vector<float>());
}

// On 2^18 draws the sample mean lies within 5 standard errors of the
// formula's and the sample standard deviation within 1% (about 7 standard
// errors); uniform kinds stay inside their bounds and come close to both.
TEST(Init, EachKindHasTheStatisticsOfItsFormula) {
  const Shape shape{512, 256, 2};  // fan_in = 256 x 2 = 512, fan_out = 512 x 2 = 1024
  const double n = 512.0 * 256 * 2, fan_in = 512, fan_out = 1024;
  struct Case {
    Init init;
    double mean, std;
    double low = -INFINITY, high = INFINITY;  // bounds of a uniform kind
  };
  auto uniform_case = [](Init init, double low, double high) {
    return Case{init, (low + high) / 2, (high - low) / std::sqrt(12.0), low, high};
  };
  const double xavier_std = 2.0 * std::sqrt(2.0 / (fan_in + fan_out));
  const double kaiming_linear = 1.0 / std::sqrt(fan_in);  // PyTorch's nn.Linear bound: a = sqrt(5)
  const double kaiming_relu = std::sqrt(6.0 / fan_in);
  const std::vector<Case> cases{
      {Init::normal(0.5f, 1.f), 1.0, 0.5},
      {Init::normal(0.02f), 0.0, 0.02},
      uniform_case(Init::uniform(-1.f, 3.f), -1.0, 3.0),
      uniform_case(Init::xavier_uniform(2.f), -xavier_std * std::sqrt(3.0), xavier_std * std::sqrt(3.0)),
      {Init::xavier_normal(0.5f), 0.0, 0.5 * std::sqrt(2.0 / (fan_in + fan_out))},
      uniform_case(Init::kaiming_uniform(std::sqrt(5.f)), -kaiming_linear, kaiming_linear),
      uniform_case(Init::kaiming_uniform(), -kaiming_relu, kaiming_relu),
      {Init::kaiming_normal(0.1f), 0.0, std::sqrt(2.0 / (1.01 * fan_in))},
  };
  for (const Case& c : cases) {
    const Moments m = moments(init_full(c.init, shape, "w", 5));
    EXPECT_NEAR(m.mean, c.mean, 5 * c.std / std::sqrt(n)) << c.init.str();
    EXPECT_NEAR(m.std, c.std, 0.01 * c.std) << c.init.str();
    if (std::isfinite(c.low)) {
      const double tol = 1e-6 * (c.high - c.low);  // float rounding of low + (high - low) u
      EXPECT_GE(m.min, c.low - tol) << c.init.str();
      EXPECT_LE(m.max, c.high + tol) << c.init.str();
      EXPECT_LT(m.min, c.low + 0.001 * (c.high - c.low)) << c.init.str() << ": the draws should reach the low end";
      EXPECT_GT(m.max, c.high - 0.001 * (c.high - c.low)) << c.init.str() << ": the draws should reach the high end";
    }
  }
}

TEST(Init, ConstantKindsAreExact) {
  const Shape shape{3, 5};
  const std::vector<float> zeros(15, 0.f), ones(15, 1.f), third(15, -0.375f);
  EXPECT_EQ(init_full(Init::zeros(), shape, "b", 1).to_vector<float>(), zeros);
  EXPECT_EQ(init_full(Init::ones(), shape, "g", 1).to_vector<float>(), ones);
  EXPECT_EQ(init_full(Init::constant(-0.375f), shape, "c", 1).to_vector<float>(), third);
  EXPECT_EQ(init_full(Init{}, {4}, "default", 9).to_vector<float>(), std::vector<float>(4, 0.f)) << "zeros by default";
  EXPECT_EQ(init_full(Init::ones(), {7}, "ln.weight", 2).to_vector<float>(), std::vector<float>(7, 1.f))
      << "1-D shapes are fine without fans";
}

TEST(Init, FanBasedKindsRefuseAShapeWithoutFans) {
  for (const Init& init : {Init::xavier_uniform(), Init::xavier_normal(), Init::kaiming_uniform(),
                           Init::kaiming_normal()}) {
    EXPECT_TRUE(test::throws_error([&] { init_full(init, {16}, "ln_f.bias", 1); }, ErrorKind::kConfig,
                                   {"ln_f.bias", "fan-in and fan-out", init.str()}))
        << init.str();
  }
  Parameter p("h.0.mlp.c_fc.bias", {16}, Tensor::empty({16}, DType::kF32), false);
  p.set_init(Init::xavier_uniform(1.f));
  EXPECT_TRUE(test::throws_error([&] { p.initial_value(1); }, ErrorKind::kConfig,
                                 {"h.0.mlp.c_fc.bias", "xavier_uniform(gain=1)", "use normal() or uniform()"}));
}

}  // namespace
}  // namespace ht::nn
