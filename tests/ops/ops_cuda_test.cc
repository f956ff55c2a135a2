// Every op on CUDA against the CPU driver, its reference: one table of cases,
// each building the same seeded inputs on both devices, running the op and
// comparing every output with a tolerance scaled to the values (bit-exact
// where both drivers do the same rounding steps in the same order). Plus index
// range errors and run-to-run determinism of the reductions. Skips visibly
// without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ht/core/device.h"
#include "ht/ops/attention.h"
#include "ht/ops/cast.h"
#include "ht/ops/cross_entropy.h"
#include "ht/ops/movement.h"
#include "ht/ops/softmax.h"
#include "ht/ops/dropout.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/embedding.h"
#include "ht/ops/index_errors.h"
#include "ht/ops/index_select.h"
#include "ht/ops/layernorm.h"
#include "ht/ops/matmul.h"
#include "ht/ops/mse.h"
#include "ht/ops/optimizer_update.h"
#include "ht/ops/reduce.h"
#include "ht/ops/rmsnorm.h"
#include "ht/ops/rope.h"
#include "ht/ops/silu.h"
#include "test_util.h"

namespace ht {
namespace {

using test::nan_tensor;
using test::random_tensor;

/// Named outputs of one run, on the device that computed them.
using Outputs = std::vector<std::pair<std::string, Tensor>>;

struct Case {
  std::string name;  // letters, digits and '_' (a gtest name)
  /// Builds the inputs from a fixed seed (so both devices see the same
  /// values), runs the op on `device` and returns its outputs.
  std::function<Outputs(Device)> run;
  /// Tolerance relative to each value and to the output's scale (see
  /// test::all_close); 0 demands the same bits.
  double rtol;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// ---------------------------------------------------------------------------
// Input helpers: host tensors built from an rng, then copied to the device.

Tensor ids_tensor(const Shape& shape, std::int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, std::int32_t(vocab - 1));
  std::vector<std::int32_t> v(std::size_t(shape_numel(shape)));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape);
}

/// A host tensor of `dtype` holding `values` rounded to it.
Tensor host_of(const std::vector<float>& values, const Shape& shape, DType dtype) {
  Tensor f = Tensor::from_vector(values, shape);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::empty(shape, dtype);
  ops::cast(f, t);
  return t;
}

/// Random values in [lo, hi) as a host tensor of `dtype`, drawn as
/// random_tensor draws them (so the f32 cases see random_tensor's values).
Tensor random_of(const Shape& shape, std::mt19937& rng, DType dtype, float lo = -1.f, float hi = 1.f) {
  return host_of(test::random_floats(std::size_t(shape_numel(shape)), rng, lo, hi), shape, dtype);
}

/// A host tensor of `dtype` filled with NaN: an output that must be overwritten.
Tensor nan_of(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  t.fill_(NAN);
  return t;
}

/// Values that exercise every rounding path of f16 and bf16: ties, f16
/// subnormals and underflow, overflow to inf, signed zeros, inf and NaN.
std::vector<float> special_floats(std::size_t n, std::mt19937& rng) {
  const float fixed[] = {0.f,       -0.f,      1.f,        -1.f,      65504.f,   65520.f,    -65536.f, 1e-8f,
                         -3e-7f,    6.1e-5f,   5.96e-8f,   2.9e-8f,   1.00048828125f, 1.0009765625f, 3.3895314e38f,
                         1e-40f,    INFINITY,  -INFINITY,  NAN,       -NAN,      1.00390625f, 1.01171875f};
  std::vector<float> v = test::random_floats(n, rng, -70000.f, 70000.f);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i % 3 == 0) v[i] = fixed[(i / 3) % std::size(fixed)];
    if (i % 3 == 1) v[i] = std::ldexp(v[i], -int(i % 40));  // small magnitudes too
  }
  return v;
}

// ---------------------------------------------------------------------------
// Comparison

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    // IEEE 754 leaves the sign and payload of an arithmetic NaN result open:
    // x86 keeps the operand's (-nan * 0.5 is -nan), a GPU returns its one
    // canonical NaN (0x7fffffff). Any NaN matches any NaN.
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " of " << got.size() << ": got " << got[i]
                                           << ", want " << want[i] << " (bits differ)";
  }
  return ::testing::AssertionSuccess();
}

void expect_outputs_match(const Outputs& want, const Outputs& got, double rtol) {
  ASSERT_EQ(want.size(), got.size());
  // An output whose exact value is zero (attention's dq and dk with a single
  // key) holds only the rounding of terms as large as the case's other
  // outputs; its own largest value is no scale for it. So every output is
  // also allowed rtol of the largest value of any output of the case.
  double case_scale = 0.0;
  for (const auto& [name, w] : want)
    for (float v : w.to_vector<float>())
      if (std::isfinite(v)) case_scale = std::max(case_scale, double(std::abs(v)));
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("output '" + want[i].first + "'");
    const Tensor& w = want[i].second;
    const Tensor& g = got[i].second;
    ASSERT_EQ(w.shape(), g.shape());
    ASSERT_EQ(w.dtype(), g.dtype());
    EXPECT_TRUE(g.device().is_cuda());
    // f16/bf16 -> float is exact and one-to-one, so comparing floats compares
    // the stored bits.
    std::vector<float> wv = w.to_vector<float>(), gv = g.to_vector<float>();
    // Equal infinities match (attention's lse of a row without keys is
    // -inf); all_close alone would see inf - inf.
    for (std::size_t e = 0; e < wv.size() && e < gv.size() && rtol != 0; ++e)
      if (std::isinf(wv[e]) && gv[e] == wv[e]) wv[e] = gv[e] = 0.f;
    if (rtol == 0)
      EXPECT_TRUE(same_bits(gv, wv));
    else
      EXPECT_TRUE(test::all_close(gv, test::to_double(wv), rtol, rtol * case_scale));
  }
}

// ---------------------------------------------------------------------------
// The table

std::string dims_name(std::initializer_list<std::int64_t> dims) {
  std::string s;
  for (auto d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

std::string dtype_tag(DType t) { return std::string(dtype_name(t)); }

// The compute ops run in f32, f16 and bf16 (ht/ops/compute_dtype.h). The f32
// cases keep their names; the 16-bit ones add the dtype.
const DType kComputeDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

std::string dtype_suffix(DType t) { return t == DType::kF32 ? "" : "_" + dtype_tag(t); }

/// The tolerance of a case in dtype `t` whose f32 version has `rtol32`. Both
/// drivers compute in f32 and round each output once: equal f32 bits stay
/// equal, and f32 results that differ in the last bits can round to
/// neighbouring 16-bit values, 2^-10 (f16) or 2^-7 (bf16) apart at most.
double rtol_for(DType t, double rtol32) {
  if (t == DType::kF32 || rtol32 == 0) return rtol32;
  return t == DType::kF16 ? 2e-3 : 1e-2;
}

void add_matmul_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t batch, m, n, k;
    bool batched;
  };
  const Size sizes[] = {{1, 0, 3, 5, false}, {1, 1, 1, 1, false},  {1, 7, 5, 33, false}, {1, 65, 129, 31, false},
                        {1, 4, 3, 0, false}, {3, 17, 5, 9, true}, {0, 4, 4, 4, true},   {2, 33, 1, 64, true}};
  for (const Size& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.f, 0.5f}) {
          const ops::MatmulOptions o{ta == 1, tb == 1, 1.25f, beta};
          for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
            // 16-bit cases once per size and transpose pair, to keep the table short.
            if (dt != DType::kF32 && beta != 0.5f) continue;
            const std::string name = "matmul_" + dtype_tag(dt) + "_" + dims_name({s.batch, s.m, s.n, s.k}) +
                                     (s.batched ? "_batched" : "") + "_ta" + std::to_string(ta) + "_tb" +
                                     std::to_string(tb) + (beta == 0.f ? "_beta0" : "_beta");
            auto run = [s, o, dt](Device dev) {
              std::mt19937 rng(11);
              Shape sa = o.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
              Shape sb = o.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
              Shape sc{s.m, s.n};
              if (s.batched)
                for (Shape* x : {&sa, &sb, &sc}) x->insert(x->begin(), s.batch);
              const Tensor a = host_of(test::random_floats(std::size_t(shape_numel(sa)), rng), sa, dt);
              const Tensor b = host_of(test::random_floats(std::size_t(shape_numel(sb)), rng), sb, dt);
              // beta == 0 must overwrite C, whose old contents may be NaN.
              const std::vector<float> c0 =
                  o.beta == 0.f ? std::vector<float>(std::size_t(shape_numel(sc)), NAN)
                                : test::random_floats(std::size_t(shape_numel(sc)), rng);
              const Tensor c = host_of(c0, sc, dt);
              Tensor cd = c.to(dev);
              ops::matmul(a.to(dev), b.to(dev), cd, o);
              return Outputs{{"c", cd}};
            };
            // f32: cuBLAS with f32 compute differs from OpenBLAS by summation
            // order only. 16-bit: one rounding of the result, at most.
            const double rtol = dt == DType::kF32 ? 1e-5 : dt == DType::kF16 ? 2e-3 : 1.6e-2;
            cases.push_back({name, run, rtol});
          }
        }
}

void add_elementwise_cases(std::vector<Case>& cases) {
  for (DType dt : kComputeDtypes)
    for (std::int64_t n : {0, 1, 1000, 300007}) {
      const std::string dims = std::to_string(n) + dtype_suffix(dt);
      cases.push_back({"add_" + dims,
                       [n, dt](Device dev) {
                         std::mt19937 rng(1);
                         const Tensor a = random_of({n}, rng, dt).to(dev), b = random_of({n}, rng, dt).to(dev);
                         Tensor out = nan_of({n}, dt).to(dev);
                         ops::add(a, b, out);
                         Tensor in_place = a.clone();  // out aliasing a
                         ops::add(in_place, b, in_place);
                         return Outputs{{"out", out}, {"in_place", in_place}};
                       },
                       0});
      cases.push_back({"scale_" + dims,
                       [n, dt](Device dev) {
                         std::mt19937 rng(2);
                         Tensor x = random_of({n}, rng, dt).to(dev);
                         ops::scale(x, -0.37f);
                         return Outputs{{"x", x}};
                       },
                       0});
      cases.push_back({"gelu_" + dims,
                       [n, dt](Device dev) {
                         std::mt19937 rng(3);
                         const Tensor x = random_of({n}, rng, dt, -6.f, 6.f).to(dev);
                         const Tensor dy = random_of({n}, rng, dt).to(dev);
                         Tensor y = nan_of({n}, dt).to(dev), dx = nan_of({n}, dt).to(dev);
                         ops::gelu_forward(x, y);
                         ops::gelu_backward(x, dy, dx);
                         Tensor y_in_place = x.clone(), dx_in_place = dy.clone();  // y aliasing x, dx aliasing dy
                         ops::gelu_forward(y_in_place, y_in_place);
                         ops::gelu_backward(x, dx_in_place, dx_in_place);
                         return Outputs{
                             {"y", y}, {"dx", dx}, {"y_in_place", y_in_place}, {"dx_in_place", dx_in_place}};
                       },
                       // tanhf differs by an ulp or two between glibc and CUDA,
                       // and nvcc may fuse multiply-adds.
                       rtol_for(dt, 2e-6)});
    }
  struct Size {
    std::int64_t rows, c;
  };
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{0, 5}, Size{1, 1}, Size{37, 33}, Size{1000, 769}, Size{3, 100}}) {
      const std::string dims = dims_name({s.rows, s.c}) + dtype_suffix(dt);
      cases.push_back({"bias_add_" + dims,
                       [s, dt](Device dev) {
                         std::mt19937 rng(4);
                         // y as (2, rows, c) on a batched view: bias broadcasts over all leading dims.
                         Tensor y = random_of({2, s.rows, s.c}, rng, dt).to(dev);
                         const Tensor bias = random_of({s.c}, rng, dt).to(dev);
                         ops::bias_add(y, bias);
                         return Outputs{{"y", y}};
                       },
                       0});
      cases.push_back({"bias_grad_" + dims,
                       [s, dt](Device dev) {
                         std::mt19937 rng(5);
                         const Tensor dy = random_of({s.rows, s.c}, rng, dt).to(dev);
                         Tensor dbias = random_of({s.c}, rng, dt).to(dev);  // accumulates
                         ops::bias_grad(dy, dbias);
                         return Outputs{{"dbias", dbias}};
                       },
                       rtol_for(dt, 1e-6)});
    }
}

void add_silu_cases(std::vector<Case>& cases) {
  for (DType dt : kComputeDtypes) {
    for (std::int64_t n : {0, 1, 1000, 300007}) {
      cases.push_back({"silu_" + std::to_string(n) + dtype_suffix(dt),
                       [n, dt](Device dev) {
                         std::mt19937 rng(20);
                         const Tensor x = random_of({n}, rng, dt, -10.f, 10.f).to(dev);
                         const Tensor dy = random_of({n}, rng, dt).to(dev);
                         Tensor y = nan_of({n}, dt).to(dev), dx = nan_of({n}, dt).to(dev);
                         ops::silu_forward(x, y);
                         ops::silu_backward(x, dy, dx);
                         Tensor y_in_place = x.clone(), dx_in_place = dy.clone();
                         ops::silu_forward(y_in_place, y_in_place);
                         ops::silu_backward(x, dx_in_place, dx_in_place);
                         return Outputs{{"y", y}, {"dx", dx}, {"y_in_place", y_in_place}, {"dx_in_place", dx_in_place}};
                       },
                       // expf on the device against the CPU's vexp: an ulp or two.
                       rtol_for(dt, 2e-6)});
    }
    struct Size {
      std::int64_t rows, f;
    };
    for (Size s : {Size{0, 4}, Size{3, 0}, Size{1, 1}, Size{37, 33}, Size{512, 1376}}) {
      cases.push_back({"swiglu_" + dims_name({s.rows, s.f}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(21);
                         const Tensor gu = random_of({s.rows, 2 * s.f}, rng, dt, -6.f, 6.f).to(dev);
                         const Tensor dout = random_of({s.rows, s.f}, rng, dt).to(dev);
                         Tensor out = nan_of({s.rows, s.f}, dt).to(dev), dgu = nan_of({s.rows, 2 * s.f}, dt).to(dev);
                         ops::swiglu_forward(gu, out);
                         ops::swiglu_backward(dout, gu, dgu);
                         Tensor in_place = gu.clone();  // dgate_up aliasing gate_up
                         ops::swiglu_backward(dout, in_place, in_place);
                         return Outputs{{"out", out}, {"dgate_up", dgu}, {"dgate_up_in_place", in_place}};
                       },
                       rtol_for(dt, 2e-6)});
    }
  }
}

void add_layernorm_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t n, c;
  };
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{0, 8}, Size{1, 1}, Size{1, 31}, Size{37, 33}, Size{300, 768}, Size{5, 1000}}) {
      cases.push_back({"layernorm_" + dims_name({s.n, s.c}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(6);
                         const Tensor x = random_of({s.n, s.c}, rng, dt, -2.f, 3.f).to(dev);
                         const Tensor w = random_of({s.c}, rng, dt).to(dev), b = random_of({s.c}, rng, dt).to(dev);
                         const Tensor dy = random_of({s.n, s.c}, rng, dt).to(dev);
                         Tensor y = nan_of({s.n, s.c}, dt).to(dev), mean = nan_of({s.n}, DType::kF32).to(dev),
                                rstd = nan_of({s.n}, DType::kF32).to(dev);
                         ops::layernorm_forward(x, w, b, y, mean, rstd);
                         Tensor dx = nan_of({s.n, s.c}, dt).to(dev);
                         Tensor dw = random_of({s.c}, rng, dt).to(dev), db = random_of({s.c}, rng, dt).to(dev);
                         ops::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
                         Tensor dx_in_place = dy.clone();  // dx aliasing dy
                         Tensor dw2 = Tensor::zeros({s.c}, dt, dev), db2 = Tensor::zeros({s.c}, dt, dev);
                         ops::layernorm_backward(dx_in_place, x, w, mean, rstd, dx_in_place, dw2, db2);
                         return Outputs{{"y", y},   {"mean", mean}, {"rstd", rstd},           {"dx", dx},
                                        {"dw", dw}, {"db", db},     {"dx_in_place", dx_in_place}, {"dw_in_place", dw2}};
                       },
                       rtol_for(dt, 1e-5)});
    }
}

void add_rmsnorm_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t n, c;
  };
  // Not C = 1: dx is then zero up to rounding (g - xhat * g * xhat with xhat
  // about +-1), and a contracted multiply-add on the device rounds it differently.
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{0, 8}, Size{1, 2}, Size{1, 31}, Size{37, 33}, Size{300, 768}, Size{5, 1000}}) {
      cases.push_back({"rmsnorm_" + dims_name({s.n, s.c}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(18);
                         const Tensor x = random_of({s.n, s.c}, rng, dt, -2.f, 3.f).to(dev);
                         const Tensor w = random_of({s.c}, rng, dt).to(dev);
                         const Tensor dy = random_of({s.n, s.c}, rng, dt).to(dev);
                         Tensor y = nan_of({s.n, s.c}, dt).to(dev), rstd = nan_of({s.n}, DType::kF32).to(dev);
                         ops::rmsnorm_forward(x, w, y, rstd);
                         Tensor y_in_place = x.clone(), rstd2 = nan_of({s.n}, DType::kF32).to(dev);  // y aliasing x
                         ops::rmsnorm_forward(y_in_place, w, y_in_place, rstd2);
                         Tensor dx = nan_of({s.n, s.c}, dt).to(dev), dw = random_of({s.c}, rng, dt).to(dev);
                         ops::rmsnorm_backward(dy, x, w, rstd, dx, dw);
                         Tensor dx_in_place = dy.clone(), dw2 = Tensor::zeros({s.c}, dt, dev);  // dx aliasing dy
                         ops::rmsnorm_backward(dx_in_place, x, w, rstd, dx_in_place, dw2);
                         return Outputs{{"y", y},   {"rstd", rstd}, {"y_in_place", y_in_place}, {"dx", dx},
                                        {"dw", dw}, {"dx_in_place", dx_in_place}, {"dw_in_place", dw2}};
                       },
                       rtol_for(dt, 1e-5)});
    }
}

void add_rope_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t b, t, h, d, t_max;
  };
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{1, 1, 1, 2, 1}, Size{2, 7, 3, 4, 9}, Size{3, 33, 4, 64, 33}, Size{2, 100, 6, 128, 128},
                   Size{0, 3, 2, 4, 3}}) {
      cases.push_back({"rope_" + dims_name({s.b, s.t, s.h, s.d, s.t_max}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(19);
                         const Tensor table = ops::rope_table(s.t_max, s.d, 10000.f, dev);
                         const Tensor x = random_of({s.b, s.t, s.h * s.d}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor dy = random_of({s.b, s.t, s.h * s.d}, rng, dt).to(dev);
                         Tensor y = nan_of(x.shape(), dt).to(dev), dx = nan_of(x.shape(), dt).to(dev);
                         ops::rope_forward(x, table, int(s.h), y);
                         ops::rope_backward(dy, table, int(s.h), dx);
                         Tensor in_place = x.clone();  // y aliasing x
                         ops::rope_forward(in_place, table, int(s.h), in_place);
                         return Outputs{{"table", table}, {"y", y}, {"dx", dx}, {"y_in_place", in_place}};
                       },
                       // Two products and a sum per element; nvcc may contract them into a multiply-add.
                       rtol_for(dt, 1e-6)});
    }
}

// Flash attention: CUDA's tiles (32 x 32) and the CPU's (64 x 64) differ, so
// the sums run in different orders. f32: a few roundings. 16-bit: the CUDA
// kernels round P and dS to the dtype before their tensor-core products
// (the CPU staging keeps them in f32), about one 16-bit rounding of every
// term: looser than one rounding of the result. These tolerances are
// estimates: the CUDA kernels have not run on a device yet.
double attention_rtol(DType t) {
  if (t == DType::kF32) return 2e-5;
  return t == DType::kF16 ? 4e-3 : 2e-2;
}

// Packed causal attention. T around the CUDA tile (32) and the CPU tile
// (64): 1, below both, not a multiple, several tiles; D 4 (padded to the
// 16-wide fragments), 16 and 64 (GPT-2's heads).
void add_attention_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t b, t, c;
    int h;
  };
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{1, 1, 8, 2}, Size{2, 7, 12, 3}, Size{3, 33, 64, 4}, Size{1, 65, 48, 2}, Size{2, 40, 8, 1},
                   Size{2, 130, 128, 2}, Size{1, 257, 64, 4}, Size{0, 5, 8, 2}, Size{2, 0, 8, 2}}) {
      cases.push_back({"attention_" + dims_name({s.b, s.t, s.c, s.h}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(7);
                         const Tensor qkv = random_of({s.b, s.t, 3 * s.c}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor dout = random_of({s.b, s.t, s.c}, rng, dt).to(dev);
                         Tensor out = nan_of({s.b, s.t, s.c}, dt).to(dev);
                         Tensor lse = nan_of({s.b, s.h, s.t}, DType::kF32).to(dev);
                         ops::attention_forward(qkv, s.h, out, lse);
                         Tensor dqkv = nan_of({s.b, s.t, 3 * s.c}, dt).to(dev);
                         ops::attention_backward(dout, qkv, out, lse, s.h, dqkv);
                         return Outputs{{"out", out}, {"lse", lse}, {"dqkv", dqkv}};
                       },
                       attention_rtol(dt)});
    }
}

// The general attention: grouped-query heads (KV = 1 and H / 2), causal or
// not, with a key padding mask whose batch entry 0 is fully masked (rows of
// zeros, lse -inf) and whose other entries mask their first 40 keys (whole
// CUDA tiles: causal rows before 40 see no key) and every third key from 42.
void add_attention_general_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t b, t, h, kv, d;
    bool causal, mask;
    std::int64_t tk = -1;  // keys; -1: t (self-attention), else cross-attention
    std::int64_t offset = 0;  // causal: query i sees keys j <= i + offset
  };
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{1, 1, 2, 1, 4, true, false}, Size{2, 7, 4, 2, 3, true, true}, Size{3, 33, 6, 3, 16, false, true},
                   Size{2, 70, 4, 1, 8, true, true}, Size{1, 65, 2, 2, 24, false, false},
                   Size{2, 100, 8, 4, 64, true, true}, Size{2, 100, 4, 1, 64, false, true},
                   Size{1, 200, 4, 2, 32, true, false}, Size{0, 5, 2, 1, 4, true, true},
                   Size{2, 0, 2, 2, 4, false, false},
                   // Cross-attention: fewer and more keys than queries, across
                   // tiles, causal ones aligned at the top left, none at all.
                   Size{2, 37, 4, 2, 8, false, true, 70}, Size{2, 70, 4, 2, 8, true, true, 45},
                   Size{3, 5, 2, 1, 16, false, false, 33}, Size{1, 9, 2, 2, 4, false, false, 0},
                   Size{2, 0, 2, 1, 4, false, true, 6},
                   // The causal mask shifted: queries the last rows of the
                   // keys (bottom right), not on a tile boundary, and past them.
                   Size{2, 37, 4, 2, 8, true, true, 70, 33}, Size{1, 70, 2, 1, 16, true, false, 140, 70},
                   Size{1, 33, 2, 2, 8, true, false, 40, 100}}) {
      const std::int64_t tk = s.tk < 0 ? s.t : s.tk;
      cases.push_back({"attention_general_" + dims_name({s.b, s.t, s.h, s.kv, s.d}) +
                           (s.tk < 0 ? "" : "_keys" + std::to_string(tk)) + (s.causal ? "_causal" : "") +
                           (s.offset ? "_offset" + std::to_string(s.offset) : "") +
                           (s.mask ? "_mask" : "") + dtype_suffix(dt),
                       [s, tk, dt](Device dev) {
                         std::mt19937 rng(17);
                         const Tensor q = random_of({s.b, s.t, s.h * s.d}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor k = random_of({s.b, tk, s.kv * s.d}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor v = random_of({s.b, tk, s.kv * s.d}, rng, dt).to(dev);
                         const Tensor dout = random_of({s.b, s.t, s.h * s.d}, rng, dt).to(dev);
                         std::vector<std::int32_t> keep(std::size_t(s.b * tk));
                         for (std::int64_t i = 0; i < s.b * tk; ++i) {
                           const std::int64_t b = i / tk, j = i % tk;
                           keep[std::size_t(i)] = b > 0 && (tk > 40 ? j >= 40 : j != 0) && j % 3 != 0;
                         }
                         const Tensor mask = Tensor::from_vector(keep, {s.b, tk}).to(dev);
                         const ops::AttentionOptions o{int(s.h), int(s.kv), s.causal, s.offset};
                         Tensor out = nan_of({s.b, s.t, s.h * s.d}, dt).to(dev);
                         Tensor lse = nan_of({s.b, s.h, s.t}, DType::kF32).to(dev);
                         const Tensor* m = s.mask ? &mask : nullptr;
                         ops::attention_forward(q, k, v, o, m, out, lse);
                         Tensor dq = nan_of(q.shape(), dt).to(dev), dk = nan_of(k.shape(), dt).to(dev),
                                dv = nan_of(v.shape(), dt).to(dev);
                         ops::attention_backward(dout, q, k, v, out, lse, o, m, dq, dk, dv);
                         return Outputs{{"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
                       },
                       attention_rtol(dt)});
    }
}

// Segment ids (document masking), both forms: documents of 1 to 50 tokens
// drawn per row (CUDA tiles of 32 skipped whole where a tile's documents
// end before another's begin, mixed elsewhere), ids that are not sorted (no
// tile skipped), and one token per document; general cases with grouped-query
// heads, causal or not, some with a key mask as well.
void add_attention_segment_cases(std::vector<Case>& cases) {
  enum Layout { kDocuments, kUnsorted, kSingletons };
  struct Size {
    std::int64_t b, t, h, kv, d;
    bool packed, causal, mask;
    Layout layout;
  };
  const auto segments = [](const Size& s, std::mt19937& rng) {
    std::vector<std::int32_t> ids(std::size_t(s.b * s.t));
    std::uniform_int_distribution<std::int64_t> length(1, 50);
    for (std::int64_t b = 0; b < s.b; ++b) {
      std::int64_t left = 0;
      std::int32_t doc = -1;
      for (std::int64_t j = 0; j < s.t; ++j) {
        if (left == 0) left = length(rng), ++doc;
        --left;
        std::int32_t& id = ids[std::size_t(b * s.t + j)];
        id = s.layout == kDocuments ? doc : s.layout == kUnsorted ? std::int32_t(7 * j / 5 % 3) : std::int32_t(j);
      }
    }
    return ids;
  };
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{2, 100, 2, 2, 8, true, true, false, kDocuments}, Size{1, 70, 3, 3, 16, true, true, false, kUnsorted},
                   Size{2, 7, 2, 2, 4, true, true, false, kSingletons}, Size{2, 130, 4, 2, 16, false, true, true, kDocuments},
                   Size{2, 100, 4, 1, 8, false, false, false, kDocuments}, Size{1, 65, 2, 1, 8, false, true, true, kUnsorted},
                   Size{2, 40, 2, 2, 24, false, false, true, kSingletons}}) {
      cases.push_back({std::string(s.packed ? "attention_segments_packed_" : "attention_segments_") +
                           dims_name({s.b, s.t, s.h, s.kv, s.d}) + (s.causal ? "_causal" : "") + (s.mask ? "_mask" : "") +
                           "_layout" + std::to_string(int(s.layout)) + dtype_suffix(dt),
                       [s, dt, segments](Device dev) {
                         std::mt19937 rng(23);
                         const Tensor ids = Tensor::from_vector(segments(s, rng), {s.b, s.t}).to(dev);
                         if (s.packed) {
                           const std::int64_t c = s.h * s.d;
                           const Tensor qkv = random_of({s.b, s.t, 3 * c}, rng, dt, -2.f, 2.f).to(dev);
                           const Tensor dout = random_of({s.b, s.t, c}, rng, dt).to(dev);
                           Tensor out = nan_of({s.b, s.t, c}, dt).to(dev);
                           Tensor lse = nan_of({s.b, s.h, s.t}, DType::kF32).to(dev);
                           ops::attention_forward(qkv, int(s.h), &ids, out, lse);
                           Tensor dqkv = nan_of(qkv.shape(), dt).to(dev);
                           ops::attention_backward(dout, qkv, out, lse, int(s.h), &ids, dqkv);
                           return Outputs{{"out", out}, {"lse", lse}, {"dqkv", dqkv}};
                         }
                         const Tensor q = random_of({s.b, s.t, s.h * s.d}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor k = random_of({s.b, s.t, s.kv * s.d}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor v = random_of({s.b, s.t, s.kv * s.d}, rng, dt).to(dev);
                         const Tensor dout = random_of({s.b, s.t, s.h * s.d}, rng, dt).to(dev);
                         std::vector<std::int32_t> keep(std::size_t(s.b * s.t));
                         for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = i % 5 != 1;
                         const Tensor mask = Tensor::from_vector(keep, {s.b, s.t}).to(dev);
                         const ops::AttentionOptions o{int(s.h), int(s.kv), s.causal};
                         Tensor out = nan_of({s.b, s.t, s.h * s.d}, dt).to(dev);
                         Tensor lse = nan_of({s.b, s.h, s.t}, DType::kF32).to(dev);
                         const Tensor* m = s.mask ? &mask : nullptr;
                         ops::attention_forward(q, k, v, o, m, &ids, out, lse);
                         Tensor dq = nan_of(q.shape(), dt).to(dev), dk = nan_of(k.shape(), dt).to(dev),
                                dv = nan_of(v.shape(), dt).to(dev);
                         ops::attention_backward(dout, q, k, v, out, lse, o, m, &ids, dq, dk, dv);
                         return Outputs{{"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
                       },
                       attention_rtol(dt)});
    }
}

void add_embedding_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t b, t, c, vocab, t_max;  // t_max 0: no position table
  };
  // The last size (f32 only) has more positions than a grid has blocks
  // (2^16), so blocks take a second run of rows: the barrier that guards
  // the shared run end between runs is then needed.
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{2, 5, 33, 7, 9}, Size{1, 1, 1, 3, 1}, Size{3, 17, 100, 50, 17}, Size{4, 64, 40, 5, 0},
                   Size{0, 4, 8, 5, 4}, Size{2, 3, 0, 5, 3}, Size{1, 70000, 2, 200000, 0}}) {
      if (s.t > 65536 && dt != DType::kF32) continue;
      cases.push_back({"embedding_" + dims_name({s.b, s.t, s.c, s.vocab, s.t_max}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(8);
                         // A small vocabulary: most ids repeat, which is what the
                         // deterministic scatter must get right.
                         const Tensor tokens = ids_tensor({s.b, s.t}, s.vocab, rng).to(dev);
                         const Tensor wte = random_of({s.vocab, s.c}, rng, dt).to(dev);
                         const Tensor wpe = s.t_max ? random_of({s.t_max, s.c}, rng, dt).to(dev) : Tensor();
                         Tensor out = nan_of({s.b, s.t, s.c}, dt).to(dev);
                         ops::embedding_forward(tokens, wte, wpe, out);
                         const Tensor dout = random_of({s.b, s.t, s.c}, rng, dt).to(dev);
                         Tensor dwte = random_of({s.vocab, s.c}, rng, dt).to(dev);  // accumulates
                         Tensor dwpe = s.t_max ? random_of({s.t_max, s.c}, rng, dt).to(dev) : Tensor();
                         ops::embedding_backward(dout, tokens, dwte, dwpe);
                         Outputs o{{"out", out}, {"dwte", dwte}};
                         if (s.t_max) o.emplace_back("dwpe", dwpe);
                         return o;
                       },
                       // Both drivers add the same values in position order.
                       0});
    }
}

void add_cross_entropy_cases(std::vector<Case>& cases) {
  struct Size {
    std::int64_t n, v;
  };
  // The last size (f32 only) has more rows than a grid has blocks (2^16):
  // blocks take a second row, and the barriers that guard the shared
  // partials between one reduction and the next are then needed.
  for (DType dt : kComputeDtypes)
    for (Size s : {Size{0, 10}, Size{1, 1}, Size{7, 33}, Size{37, 1000}, Size{3, 50257}, Size{70000, 2}}) {
      if (s.n > 65536 && dt != DType::kF32) continue;
      cases.push_back({"cross_entropy_" + dims_name({s.n, s.v}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(9);
                         const Tensor logits = random_of({s.n, s.v}, rng, dt, -8.f, 8.f).to(dev);
                         const Tensor targets = ids_tensor({s.n}, s.v, rng).to(dev);
                         Tensor losses = nan_of({s.n}, DType::kF32).to(dev), lse = nan_of({s.n}, DType::kF32).to(dev);
                         ops::cross_entropy_forward(logits, targets, losses, lse);
                         const float dloss = s.n ? 1.f / float(s.n) : 1.f;
                         Tensor dlogits = nan_of({s.n, s.v}, dt).to(dev);
                         ops::cross_entropy_backward(logits, targets, lse, dloss, dlogits);
                         Tensor in_place = logits.clone();  // dlogits aliasing logits
                         ops::cross_entropy_backward(in_place, targets, lse, dloss, in_place);
                         return Outputs{{"losses", losses}, {"lse", lse}, {"dlogits", dlogits}, {"in_place", in_place}};
                       },
                       rtol_for(dt, 1e-5)});
      // An ignore index (a third of the rows) and label smoothing, also
      // over a vocabulary shard's columns.
      if (s.n > 65536) continue;
      cases.push_back({"cross_entropy_ignore_smooth_" + dims_name({s.n, s.v}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(12);
                         const ops::CrossEntropyOptions o{.ignore_index = -100, .label_smoothing = 0.1f};
                         const Tensor logits = random_of({s.n, s.v}, rng, dt, -8.f, 8.f).to(dev);
                         Tensor targets = ids_tensor({s.n}, s.v, rng);
                         for (std::int64_t i = 0; i < s.n; i += 3) targets.data<std::int32_t>()[i] = -100;
                         targets = targets.to(dev);
                         Tensor losses = nan_of({s.n}, DType::kF32).to(dev), lse = nan_of({s.n}, DType::kF32).to(dev);
                         ops::cross_entropy_forward(logits, targets, losses, lse, o);
                         Tensor dlogits = nan_of({s.n, s.v}, dt).to(dev);
                         ops::cross_entropy_backward(logits, targets, lse, 0.5f, dlogits, {}, o);
                         const std::int64_t cols = s.v / 2 + 1;  // the shard [v - cols, v) of the logits' vocabulary
                         const Tensor part = random_of({s.n, cols}, rng, dt, -8.f, 8.f).to(dev);
                         Tensor dpart = nan_of({s.n, cols}, dt).to(dev);
                         ops::cross_entropy_backward(part, targets, lse, 0.5f, dpart, {s.v - cols, s.v}, o);
                         return Outputs{{"losses", losses}, {"lse", lse}, {"dlogits", dlogits}, {"shard", dpart}};
                       },
                       rtol_for(dt, 1e-5)});
    }
}

// Vocabulary-parallel pieces: one shard of an embedding table and of the
// logits, with ids and targets drawn from the whole vocabulary (so that many
// fall in other shards), shards of unequal rows included.
void add_vocab_shard_cases(std::vector<Case>& cases) {
  struct EmbSize {
    std::int64_t b, t, c, vocab, t_max, start, rows;  // t_max 0: no position table
  };
  for (DType dt : kComputeDtypes)
    for (EmbSize s : {EmbSize{2, 5, 33, 7, 9, 4, 3}, EmbSize{3, 17, 100, 50, 17, 17, 17},
                      EmbSize{4, 64, 40, 5, 0, 0, 3},
                      EmbSize{2, 9, 65, 1000, 0, 667, 333}, EmbSize{2, 4, 8, 6, 4, 6, 0}}) {
      cases.push_back({"embedding_shard_" + dims_name({s.b, s.t, s.c, s.vocab, s.t_max, s.start, s.rows}) +
                           dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(10);
                         const ops::VocabShard shard{s.start, s.vocab};
                         const Tensor tokens = ids_tensor({s.b, s.t}, s.vocab, rng).to(dev);
                         const Tensor wte = random_of({s.rows, s.c}, rng, dt).to(dev);
                         const Tensor wpe = s.t_max ? random_of({s.t_max, s.c}, rng, dt).to(dev) : Tensor();
                         Tensor out = nan_of({s.b, s.t, s.c}, dt).to(dev);
                         ops::embedding_forward(tokens, wte, wpe, out, shard);
                         const Tensor dout = random_of({s.b, s.t, s.c}, rng, dt).to(dev);
                         Tensor dwte = random_of({s.rows, s.c}, rng, dt).to(dev);  // accumulates
                         Tensor dwpe = s.t_max ? random_of({s.t_max, s.c}, rng, dt).to(dev) : Tensor();
                         ops::embedding_backward(dout, tokens, dwte, dwpe, shard);
                         Outputs o{{"out", out}, {"dwte", dwte}};
                         if (s.t_max) o.emplace_back("dwpe", dwpe);
                         return o;
                       },
                       0});
    }
  struct CeSize {
    std::int64_t n, vocab, start, cols;
  };
  for (DType dt : kComputeDtypes)
    for (CeSize s : {CeSize{0, 10, 5, 5}, CeSize{1, 2, 1, 1}, CeSize{7, 33, 0, 17}, CeSize{7, 33, 17, 16},
                     CeSize{37, 1000, 334, 333}, CeSize{3, 50257, 25129, 25128}}) {
      cases.push_back({"cross_entropy_shard_" + dims_name({s.n, s.vocab, s.start, s.cols}) + dtype_suffix(dt),
                       [s, dt](Device dev) {
                         std::mt19937 rng(11);
                         const ops::VocabShard shard{s.start, s.vocab};
                         const Tensor logits = random_of({s.n, s.cols}, rng, dt, -8.f, 8.f).to(dev);
                         const Tensor targets = ids_tensor({s.n}, s.vocab, rng).to(dev);
                         Tensor lse = nan_of({s.n}, DType::kF32).to(dev);
                         Tensor target_logit = nan_of({s.n}, DType::kF32).to(dev);
                         ops::cross_entropy_shard_forward(logits, targets, shard, lse, target_logit);
                         // The backward takes the global lse, above any one shard's.
                         const Tensor global_lse = random_of({s.n}, rng, DType::kF32, 9.f, 11.f).to(dev);
                         const float dloss = s.n ? 1.f / float(s.n) : 1.f;
                         Tensor dlogits = nan_of({s.n, s.cols}, dt).to(dev);
                         ops::cross_entropy_backward(logits, targets, global_lse, dloss, dlogits, shard);
                         Tensor in_place = logits.clone();
                         ops::cross_entropy_backward(in_place, targets, global_lse, dloss, in_place, shard);
                         return Outputs{{"lse", lse},
                                        {"target_logit", target_logit},
                                        {"dlogits", dlogits},
                                        {"in_place", in_place}};
                       },
                       rtol_for(dt, 1e-5)});
    }
}

std::string shape_name(const Shape& shape) {
  std::string s;
  for (auto d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// The modelling kit: mean-squared error, sum/mean along a dimension, index_select.
void add_modelling_kit_cases(std::vector<Case>& cases) {
  for (DType dt : kComputeDtypes)
    for (const Shape& shape : {Shape{1}, Shape{3, 5}, Shape{100003}}) {
      cases.push_back({"mse_" + std::to_string(shape_numel(shape)) + dtype_suffix(dt),
                       [shape, dt](Device dev) {
                         std::mt19937 rng(22);
                         const Tensor p = random_of(shape, rng, dt, -3.f, 3.f).to(dev);
                         const Tensor t = random_of(shape, rng, dt, -3.f, 3.f).to(dev);
                         Tensor loss = nan_of({1}, DType::kF32).to(dev), dp = nan_of(shape, dt).to(dev);
                         ops::mse_forward(p, t, loss);
                         ops::mse_backward(p, t, 0.5f, dp);
                         Tensor in_place = p.clone();  // dpred aliasing pred
                         ops::mse_backward(in_place, t, 0.5f, in_place);
                         return Outputs{{"loss", loss}, {"dpred", dp}, {"dpred_in_place", in_place}};
                       },
                       // Both sum in double (in different orders): only the final rounding can differ.
                       rtol_for(dt, 1e-6)});
    }
  struct ReduceCase {
    Shape shape;
    int dim;
  };
  for (DType dt : kComputeDtypes)
    for (const ReduceCase& c : {ReduceCase{{5, 3}, 0}, ReduceCase{{5, 3}, 1}, ReduceCase{{3, 13, 5}, 1},
                                ReduceCase{{4, 70001}, 1}, ReduceCase{{2, 3, 300}, 1}, ReduceCase{{3, 0, 2}, 1},
                                ReduceCase{{2, 5, 7, 3}, -1}})
      for (ops::Reduction r : {ops::Reduction::kSum, ops::Reduction::kMean}) {
        if (r == ops::Reduction::kMean && shape_numel(c.shape) == 0) continue;  // a mean of nothing throws
        const int dim = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
        cases.push_back({std::string(r == ops::Reduction::kMean ? "reduce_mean_" : "reduce_sum_") +
                             shape_name(c.shape) + "_dim" + std::to_string(dim) +
                             dtype_suffix(dt),
                         [c, dim, r, dt](Device dev) {
                           std::mt19937 rng(23);
                           Shape small = c.shape;
                           small.erase(small.begin() + dim);
                           const Tensor x = random_of(c.shape, rng, dt, -2.f, 2.f).to(dev);
                           const Tensor dout = random_of(small, rng, dt).to(dev);
                           Tensor out = nan_of(small, dt).to(dev), dx = nan_of(c.shape, dt).to(dev);
                           ops::reduce(x, c.dim, r, out);
                           ops::reduce_backward(dout, c.dim, c.shape[std::size_t(dim)], r, dx);
                           return Outputs{{"out", out}, {"dx", dx}};
                         },
                         // Sums in double: the last dimension's warp tree differs from the CPU's lanes.
                         rtol_for(dt, 1e-6)});
      }
  struct IndexCase {
    Shape shape;
    int dim;
    std::vector<std::int32_t> index;
  };
  for (DType dt : kComputeDtypes)
    for (const IndexCase& c : {IndexCase{{4, 3}, 0, {3, 0, 3}}, IndexCase{{2, 5, 3}, 1, {0}},
                               IndexCase{{2, 5, 3}, -1, {2, 2, 0}}, IndexCase{{3, 7}, 1, {}},
                               IndexCase{{2, 6, 300}, 1, {5, 5, 0, 5}}, IndexCase{{700, 2}, 0, {1, 699, 1}}}) {
      const int dim = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
      cases.push_back({"index_select_" + shape_name(c.shape) + "_dim" + std::to_string(dim) +
                           "_k" + std::to_string(c.index.size()) + dtype_suffix(dt),
                       [c, dim, dt](Device dev) {
                         std::mt19937 rng(24);
                         Shape small = c.shape;
                         small[std::size_t(dim)] = std::int64_t(c.index.size());
                         const Tensor x = random_of(c.shape, rng, dt).to(dev);
                         const Tensor dout = random_of(small, rng, dt).to(dev);
                         const Tensor index = Tensor::from_vector(c.index, {std::int64_t(c.index.size())}).to(dev);
                         Tensor out = nan_of(small, dt).to(dev), dx = nan_of(c.shape, dt).to(dev);
                         ops::index_select(x, c.dim, index, out);
                         ops::index_select_backward(dout, c.dim, index, dx);
                         return Outputs{{"out", out}, {"dx", dx}};
                       },
                       // A gather, and a scatter-add in index order on both drivers.
                       0});
    }
}

// The element-wise product and its backward, masked mean pooling and dropout.
// Every one is bit-exact: the same f32 roundings (products, one division),
// double sums in the same order on both drivers, and dropout's decisions in
// integer arithmetic.
void add_mul_pool_dropout_cases(std::vector<Case>& cases) {
  struct MulShape {
    Shape a;
    bool broadcast;
  };
  const MulShape mul_shapes[] = {{{0}, false},      {{1}, false},       {{1000}, false},   {{300007}, false},
                                 {{0, 5}, true},    {{1, 1}, true},     {{37, 33}, true},  {{1000, 769}, true},
                                 {{130, 1}, true},  {{2, 3, 100}, true}, {{4, 0}, true},    {{65, 7}, false}};
  for (DType dt : kComputeDtypes)
    for (const MulShape& m : mul_shapes) {
      const Shape sb = m.broadcast ? Shape{m.a.back()} : m.a;
      cases.push_back({"mul_" + shape_name(m.a) + (m.broadcast ? "_by_row" : "") + dtype_suffix(dt),
                       [m, sb, dt](Device dev) {
                         std::mt19937 rng(30);
                         const Tensor a = random_of(m.a, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor b = random_of(sb, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor dy = random_of(m.a, rng, dt).to(dev);
                         Tensor out = nan_of(m.a, dt).to(dev);
                         ops::mul(a, b, out);
                         Tensor in_place = a.clone();  // out aliasing a
                         ops::mul(in_place, b, in_place);
                         Tensor da = nan_of(m.a, dt).to(dev), db = nan_of(sb, dt).to(dev);
                         ops::mul_backward(dy, a, b, &da, &db);
                         return Outputs{{"out", out}, {"in_place", in_place}, {"da", da}, {"db", db}};
                       },
                       0});
    }
  struct PoolDims {
    std::int64_t b, t, c;
  };
  for (DType dt : kComputeDtypes)
    for (const PoolDims& d : {PoolDims{0, 3, 2}, PoolDims{1, 1, 1}, PoolDims{2, 5, 3}, PoolDims{3, 7, 1},
                              PoolDims{4, 13, 300}, PoolDims{2, 0, 4}, PoolDims{16, 128, 64}}) {
      cases.push_back({"masked_mean_" + dims_name({d.b, d.t, d.c}) + dtype_suffix(dt),
                       [d, dt](Device dev) {
                         std::mt19937 rng(31);
                         const Tensor x = random_of({d.b, d.t, d.c}, rng, dt, -2.f, 2.f).to(dev);
                         const Tensor dout = random_of({d.b, d.c}, rng, dt).to(dev);
                         // Random keeps (any nonzero value), and batch row 1 all masked.
                         std::uniform_int_distribution<std::int32_t> pick(-1, 2);
                         std::vector<std::int32_t> m(std::size_t(d.b * d.t));
                         for (std::size_t i = 0; i < m.size(); ++i)
                           m[i] = i / std::size_t(d.t) == 1 ? 0 : pick(rng);
                         const Tensor mask = Tensor::from_vector(m, {d.b, d.t}).to(dev);
                         Tensor out = nan_of({d.b, d.c}, dt).to(dev), dx = nan_of({d.b, d.t, d.c}, dt).to(dev);
                         ops::masked_mean(x, mask, out);
                         ops::masked_mean_backward(dout, mask, dx);
                         return Outputs{{"out", out}, {"dx", dx}};
                       },
                       0});
    }
  for (DType dt : kComputeDtypes)
    for (const Shape& shape : {Shape{0, 4}, Shape{1}, Shape{7}, Shape{3, 5}, Shape{300007}, Shape{37, 3, 33},
                               Shape{4, 0}})
      for (float p : {0.1f, 0.5f}) {
        cases.push_back({"dropout_" + shape_name(shape) + (p == 0.1f ? "_p01" : "_p05") + dtype_suffix(dt),
                         [shape, p, dt](Device dev) {
                           std::mt19937 rng(32);
                           const Tensor x = random_of(shape, rng, dt, -3.f, 3.f).to(dev);
                           Tensor out = nan_of(shape, dt).to(dev), shifted = nan_of(shape, dt).to(dev);
                           ops::dropout(x, p, {77, 5, 0}, out);
                           Tensor in_place = x.clone();  // out aliasing x
                           ops::dropout(in_place, p, {77, 5, 0}, in_place);
                           ops::dropout(x, p, {~0ULL, 1ULL << 40, 123456789}, shifted);
                           return Outputs{{"out", out}, {"in_place", in_place}, {"shifted", shifted}};
                         },
                         0});
      }
}

// Slices, transposes (bit-exact: copies) and softmaxes, over every compute
// dtype, with empty and one-element dimensions.
void add_movement_softmax_cases(std::vector<Case>& cases) {
  for (DType dt : kComputeDtypes)
    for (const Shape& shape : {Shape{0, 3}, Shape{1, 1}, Shape{3, 5, 7}, Shape{2, 33, 4, 9}, Shape{129, 257}}) {
      cases.push_back({"movement_" + shape_name(shape) + dtype_suffix(dt),
                       [shape, dt](Device dev) {
                         std::mt19937 rng(40);
                         const Tensor x = random_of(shape, rng, dt).to(dev);
                         const int last = int(shape.size()) - 1;
                         Shape cut = shape;
                         cut[std::size_t(last)] = (shape.back() + 1) / 2;  // [start, start + cut) of the last dim
                         const std::int64_t start = shape.back() - cut.back();
                         Tensor part = Tensor::empty(cut, dt, dev), whole = Tensor::zeros(shape, dt, dev);
                         ops::narrow(x, last, start, part);
                         ops::narrow_into(part, last, 0, whole);
                         Shape swapped = shape;
                         std::swap(swapped.front(), swapped.back());
                         Tensor t = Tensor::empty(swapped, dt, dev);
                         ops::transpose(x, 0, last, t);
                         Outputs o{{"narrow", part}, {"narrow_into", whole}, {"transpose", t}};
                         if (shape.size() > 2) {
                           Shape inner = shape;
                           std::swap(inner[1], inner[2]);
                           Tensor t12 = Tensor::empty(inner, dt, dev);
                           ops::transpose(x, 1, 2, t12);
                           o.emplace_back("transpose_1_2", t12);
                         }
                         return o;
                       },
                       0});
      cases.push_back({"softmax_" + shape_name(shape) + dtype_suffix(dt),
                       [shape, dt](Device dev) {
                         std::mt19937 rng(41);
                         const Tensor x = random_of(shape, rng, dt, -6.f, 6.f).to(dev);
                         const Tensor dy = random_of(shape, rng, dt).to(dev);
                         Outputs o;
                         for (bool log : {false, true}) {
                           Tensor y = nan_of(shape, dt).to(dev), dx = nan_of(shape, dt).to(dev);
                           ops::softmax_forward(x, y, log);
                           ops::softmax_backward(y, dy, dx, log);
                           o.emplace_back(log ? "log_softmax" : "softmax", y);
                           o.emplace_back(log ? "dlog_softmax" : "dsoftmax", dx);
                         }
                         return o;
                       },
                       rtol_for(dt, 1e-5)});
    }
}

void add_precision_cases(std::vector<Case>& cases) {
  const DType floats[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType from : floats)
    for (DType to : floats)
      for (std::int64_t n : {0, 1, 4099}) {
        cases.push_back({"cast_" + dtype_tag(from) + "_to_" + dtype_tag(to) + "_" + std::to_string(n),
                         [from, to, n](Device dev) {
                           std::mt19937 rng(10);
                           const Tensor src = host_of(special_floats(std::size_t(n), rng), {n}, from).to(dev);
                           Tensor dst = host_of(std::vector<float>(std::size_t(n), NAN), {n}, to).to(dev);
                           ops::cast(src, dst);
                           return Outputs{{"dst", dst}};
                         },
                         0});
      }
  for (DType dt : floats)
    for (std::int64_t n : {0, 1, 100003}) {
      const std::string tag = dtype_tag(dt) + "_" + std::to_string(n);
      cases.push_back({"scale_and_check_finite_" + tag,
                       [dt, n](Device dev) {
                         std::mt19937 rng(12);
                         std::vector<float> v = test::random_floats(std::size_t(n), rng, -100.f, 100.f);
                         Tensor finite = host_of(v, {n}, dt).to(dev);
                         Tensor flag_finite = Tensor::zeros({1}, DType::kF32, dev);
                         ops::scale_and_check_finite(finite, 0.125f, flag_finite);
                         // A scale that overflows 16-bit types (f32 stays finite), and a NaN.
                         Tensor overflow = host_of(v, {n}, dt).to(dev);
                         Tensor flag_overflow = Tensor::zeros({1}, DType::kF32, dev);
                         ops::scale_and_check_finite(overflow, 4096.f, flag_overflow);
                         if (n > 0) v[std::size_t(n / 2)] = NAN;
                         Tensor with_nan = host_of(v, {n}, dt).to(dev);
                         Tensor flag_nan = Tensor::zeros({1}, DType::kF32, dev);
                         ops::scale_and_check_finite(with_nan, 0.5f, flag_nan);
                         // The flag is never reset: a finite tensor leaves an earlier 1.
                         Tensor sticky = Tensor::zeros({1}, DType::kF32, dev);
                         sticky.fill_(1.f);
                         Tensor again = host_of(test::random_floats(std::size_t(n), rng), {n}, dt).to(dev);
                         ops::scale_and_check_finite(again, 2.f, sticky);
                         return Outputs{{"finite", finite},       {"flag_finite", flag_finite},
                                        {"overflow", overflow},   {"flag_overflow", flag_overflow},
                                        {"with_nan", with_nan},   {"flag_nan", flag_nan},
                                        {"sticky", sticky}};
                       },
                       0});
      cases.push_back({"sum_squares_" + tag,
                       [dt, n](Device dev) {
                         std::mt19937 rng(13);
                         const Tensor x = host_of(test::random_floats(std::size_t(n), rng, -3.f, 3.f), {n}, dt).to(dev);
                         Tensor acc = Tensor::zeros({1}, DType::kF32, dev);
                         acc.fill_(1.5f);  // accumulates
                         ops::sum_squares(x, acc);
                         return Outputs{{"acc", acc}};
                       },
                       // Both sum in double; only the final rounding to f32 can differ.
                       1e-6});
    }
}

void add_optimizer_cases(std::vector<Case>& cases) {
  for (DType gt : {DType::kF32, DType::kF16, DType::kBF16})
    for (std::int64_t n : {0, 1, 70001}) {
      const std::string tag = dtype_tag(gt) + "_" + std::to_string(n);
      cases.push_back({"adamw_" + tag,
                       [gt, n](Device dev) {
                         std::mt19937 rng(14);
                         Tensor p = random_tensor({n}, rng).to(dev);
                         const Tensor g = host_of(test::random_floats(std::size_t(n), rng, -4.f, 4.f), {n}, gt).to(dev);
                         Tensor m = random_tensor({n}, rng, -0.1f, 0.1f).to(dev);
                         Tensor v = random_tensor({n}, rng, 0.f, 0.1f).to(dev);
                         ops::AdamWHyper h;
                         h.lr = 3e-3f;
                         h.weight_decay = 0.1f;
                         h.step = 7;
                         h.grad_scale = 0.25f;
                         ops::adamw_update(p, g, m, v, h);
                         return Outputs{{"param", p}, {"exp_avg", m}, {"exp_avg_sq", v}};
                       },
                       1e-5});
      for (int variant = 0; variant < 3; ++variant) {
        cases.push_back({"sgd_" + tag + "_variant" + std::to_string(variant),
                         [gt, n, variant](Device dev) {
                           std::mt19937 rng(15);
                           Tensor p = random_tensor({n}, rng).to(dev);
                           const Tensor g = host_of(test::random_floats(std::size_t(n), rng), {n}, gt).to(dev);
                           ops::SgdHyper h;
                           h.lr = 0.05f;
                           h.weight_decay = 0.01f;
                           h.grad_scale = 0.5f;
                           Tensor buf;  // undefined without momentum
                           if (variant > 0) {
                             h.momentum = 0.9f;
                             h.nesterov = variant == 2;
                             h.first_step = variant == 1;
                             buf = random_tensor({n}, rng).to(dev);
                           }
                           ops::sgd_update(p, g, buf, h);
                           Outputs o{{"param", p}};
                           if (buf.defined()) o.emplace_back("momentum_buf", buf);
                           return o;
                         },
                         1e-6});
      }
    }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_matmul_cases(cases);
  add_elementwise_cases(cases);
  add_silu_cases(cases);
  add_layernorm_cases(cases);
  add_rmsnorm_cases(cases);
  add_rope_cases(cases);
  add_attention_cases(cases);
  add_attention_general_cases(cases);
  add_attention_segment_cases(cases);
  add_embedding_cases(cases);
  add_cross_entropy_cases(cases);
  add_vocab_shard_cases(cases);
  add_modelling_kit_cases(cases);
  add_mul_pool_dropout_cases(cases);
  add_movement_softmax_cases(cases);
  add_precision_cases(cases);
  add_optimizer_cases(cases);
  return cases;
}

class OpsCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(OpsCudaTest, MatchesCpu) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const Outputs want = c.run(Device::cpu());
  const Outputs got = c.run(Device::cuda());
  expect_outputs_match(want, got, c.rtol);
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpsCudaTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Index range errors: the same ht::Error kind and message as the CPU driver.

// The embedding defers its range check to raise_index_errors (no host wait
// inside a step): the bad ids are skipped, the lowest bad position is
// reported, and the record is cleared by the report.
TEST(OpsCudaErrors, EmbeddingRecordsTokenOutsideVocabulary) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda();
  const std::int64_t vocab = 7, c = 4;
  std::vector<std::int32_t> ids(2 * 5, 1);
  ids[1 * 5 + 4] = -3;  // a later bad one, written first: the lowest position must still win
  ids[1 * 5 + 2] = 7;   // batch row 1, position 2: the first bad one
  const Tensor tokens = Tensor::from_vector(ids, {2, 5}).to(dev);
  Tensor wte = Tensor::zeros({vocab, c}, DType::kF32, dev);
  wte.fill_(2.f);
  Tensor out = Tensor::zeros({2, 5, c}, DType::kF32, dev);
  ops::raise_index_errors(dev);  // nothing recorded yet
  ops::embedding_forward(tokens, wte, Tensor(), out);
  Tensor dwte = Tensor::zeros({vocab, c}, DType::kF32, dev), no_wpe;
  Tensor dout = Tensor::zeros({2, 5, c}, DType::kF32, dev);
  dout.fill_(1.f);
  ops::embedding_backward(dout, tokens, dwte, no_wpe);
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"token id 7", "batch row 1", "position 2", "[0, 7)"}));
  ops::raise_index_errors(dev);  // cleared by the report
  // The bad positions' rows are zeros; the good ones hold their wte row.
  const std::vector<float> o = out.to_vector<float>();
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t j = 0; j < c; ++j)
      EXPECT_EQ(o[i * std::size_t(c) + std::size_t(j)], ids[i] == 1 ? 2.f : 0.f) << "position " << i;
  // Only token 1's row got gradients: one per good position (8 of them).
  const std::vector<float> g = dwte.to_vector<float>();
  for (std::int64_t r = 0; r < vocab; ++r)
    for (std::int64_t j = 0; j < c; ++j) EXPECT_EQ(g[std::size_t(r * c + j)], r == 1 ? 8.f : 0.f) << "row " << r;
}

// Errors of two ops in one step keep their own fields: the embedding's is
// reported with its own row and position, and the report clears both.
TEST(OpsCudaErrors, TwoOpsRecordsDoNotMix) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda();
  const Tensor tokens = Tensor::from_vector(std::vector<std::int32_t>{1, 1, 1, 9}, {2, 2}).to(dev);
  const Tensor wte = Tensor::zeros({7, 4}, DType::kF32, dev);
  Tensor out = Tensor::zeros({2, 2, 4}, DType::kF32, dev);
  const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{-2, 0, 0, 0}, {4}).to(dev);
  const Tensor logits = Tensor::zeros({4, 3}, DType::kF32, dev);
  Tensor losses = Tensor::zeros({4}, DType::kF32, dev), lse = Tensor::zeros({4}, DType::kF32, dev);
  ops::cross_entropy_forward(logits, targets, losses, lse);  // a lower position (0), another op
  ops::embedding_forward(tokens, wte, Tensor(), out);
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"embedding", "token id 9 at batch row 1, position 1", "[0, 7)"}));
  ops::raise_index_errors(dev);  // both cleared
}

TEST(OpsCudaErrors, CrossEntropyRecordsTargetOutsideVocabulary) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda();
  std::vector<std::int32_t> tg = {0, 2, 1, -1, 5};
  const Tensor targets = Tensor::from_vector(tg, {5}).to(dev);
  const Tensor logits = Tensor::zeros({5, 3}, DType::kF32, dev);
  Tensor losses = Tensor::zeros({5}, DType::kF32, dev), lse = Tensor::zeros({5}, DType::kF32, dev);
  ops::cross_entropy_forward(logits, targets, losses, lse);  // recorded on the device, no wait
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"cross_entropy", "target -1 at row 3", "[0, 3)"}));
  Tensor dlogits = Tensor::zeros({5, 3}, DType::kF32, dev);
  ops::cross_entropy_backward(logits, targets, lse, 1.f, dlogits);
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"target -1 at row 3"}));
  ops::raise_index_errors(dev);  // cleared by the report
}

TEST(OpsCudaErrors, VocabShardOpsCheckIdsAgainstTheFullVocabulary) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda();
  // Shard [3, 6) of a vocabulary of 8: ids 0..7 are valid, 8 is not.
  const ops::VocabShard shard{3, 8};
  const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{7, 0, 8, 4}, {4}).to(dev);
  const Tensor logits = Tensor::zeros({4, 3}, DType::kF32, dev);
  Tensor lse = Tensor::zeros({4}, DType::kF32, dev), tl = Tensor::zeros({4}, DType::kF32, dev);
  ops::cross_entropy_shard_forward(logits, targets, shard, lse, tl);
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"target 8 at row 2", "[0, 8)"}));
  Tensor dlogits = Tensor::zeros({4, 3}, DType::kF32, dev);
  ops::cross_entropy_backward(logits, targets, lse, 1.f, dlogits, shard);
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"target 8 at row 2", "[0, 8)"}));
  const Tensor tokens = Tensor::from_vector(std::vector<std::int32_t>{7, 0, 8, 4}, {2, 2}).to(dev);
  Tensor out = Tensor::zeros({2, 2, 4}, DType::kF32, dev);
  const Tensor wte = Tensor::zeros({3, 4}, DType::kF32, dev);
  ops::embedding_forward(tokens, wte, Tensor(), out, shard);  // id 7 is valid: another shard's row
  EXPECT_TRUE(test::throws_error([&] { ops::raise_index_errors(dev); }, ErrorKind::kOutOfRange,
                                 {"token id 8", "batch row 1, position 0", "[0, 8)"}));
}

TEST(OpsCudaErrors, IndexSelectRejectsIndexOutsideTheDimension) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda();
  const Tensor x = Tensor::zeros({2, 5, 4}, DType::kF32, dev);
  const Tensor index = Tensor::from_vector(std::vector<std::int32_t>{0, 5, -1}, {3}).to(dev);
  Tensor out = Tensor::zeros({2, 3, 4}, DType::kF32, dev);
  EXPECT_TRUE(test::throws_error([&] { ops::index_select(x, 1, index, out); }, ErrorKind::kOutOfRange,
                                 {"index_select", "index 5 at position 1", "outside [0, 5)", "dimension 1 of 'x'"}));
  Tensor dx = Tensor::zeros({2, 5, 4}, DType::kF32, dev);
  dx.fill_(3.f);
  EXPECT_TRUE(test::throws_error([&] { ops::index_select_backward(out, 1, index, dx); }, ErrorKind::kOutOfRange,
                                 {"index_select_backward", "index 5 at position 1"}));
  for (float v : dx.to_vector<float>()) EXPECT_EQ(v, 3.f);  // nothing written before the throw
}

// ---------------------------------------------------------------------------
// Determinism: the reductions give the same bits on every run.

TEST(OpsCudaDeterminism, ReductionsRepeatBitForBit) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device dev = Device::cuda();
  auto run_once = [&] {
    std::mt19937 rng(16);
    const std::int64_t rows = 4096, c = 200, vocab = 3;
    const Tensor dy = random_tensor({rows, c}, rng).to(dev);
    const Tensor x = random_tensor({rows, c}, rng).to(dev);
    const Tensor w = random_tensor({c}, rng).to(dev), b = random_tensor({c}, rng).to(dev);
    Outputs o;
    Tensor dbias = Tensor::zeros({c}, DType::kF32, dev);
    ops::bias_grad(dy, dbias);
    o.emplace_back("dbias", dbias);
    Tensor y = Tensor::empty({rows, c}, DType::kF32, dev), mean = Tensor::empty({rows}, DType::kF32, dev),
           rstd = Tensor::empty({rows}, DType::kF32, dev);
    ops::layernorm_forward(x, w, b, y, mean, rstd);
    Tensor dx = Tensor::empty({rows, c}, DType::kF32, dev);
    Tensor dw = Tensor::zeros({c}, DType::kF32, dev), db = Tensor::zeros({c}, DType::kF32, dev);
    ops::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
    o.emplace_back("dw", dw);
    o.emplace_back("db", db);
    // Three token ids over 4096 positions: every id repeats about 1365 times.
    const Tensor tokens = ids_tensor({8, rows / 8}, vocab, rng).to(dev);
    Tensor dwte = Tensor::zeros({vocab, c}, DType::kF32, dev);
    Tensor dwpe = Tensor::zeros({rows / 8, c}, DType::kF32, dev);
    ops::embedding_backward(dy.view({8, rows / 8, c}), tokens, dwte, dwpe);
    o.emplace_back("dwte", dwte);
    o.emplace_back("dwpe", dwpe);
    Tensor acc = Tensor::zeros({1}, DType::kF32, dev);
    ops::sum_squares(dy, acc);
    o.emplace_back("sum_squares", acc);
    // The new ops' reductions: RMSNorm's weight gradient, sums along a
    // dimension, the MSE loss, a scatter-add with repeated indices, and the
    // grouped-query attention's dk and dv (sums over the query heads).
    Tensor rms_rstd = Tensor::empty({rows}, DType::kF32, dev);
    ops::rmsnorm_forward(x, w, y, rms_rstd);
    Tensor rms_dw = Tensor::zeros({c}, DType::kF32, dev);
    ops::rmsnorm_backward(dy, x, w, rms_rstd, dx, rms_dw);
    o.emplace_back("rmsnorm_dw", rms_dw);
    Tensor col_sum = Tensor::empty({c}, DType::kF32, dev), row_sum = Tensor::empty({rows}, DType::kF32, dev);
    ops::reduce(dy, 0, ops::Reduction::kSum, col_sum);
    ops::reduce(dy, 1, ops::Reduction::kMean, row_sum);
    o.emplace_back("reduce_dim0", col_sum);
    o.emplace_back("reduce_dim1", row_sum);
    Tensor loss = Tensor::empty({1}, DType::kF32, dev);
    ops::mse_forward(x, dy, loss);
    o.emplace_back("mse", loss);
    std::vector<std::int32_t> picks(static_cast<std::size_t>(rows));
    for (std::size_t i = 0; i < picks.size(); ++i) picks[i] = std::int32_t(i % vocab);
    const Tensor index = Tensor::from_vector(picks, {rows}).to(dev);
    Tensor scattered = Tensor::empty({vocab, c}, DType::kF32, dev);
    ops::index_select_backward(dy, 0, index, scattered);
    o.emplace_back("index_select_backward", scattered);
    const Tensor q = random_tensor({4, 64, 128}, rng).to(dev), kv = random_tensor({4, 64, 32}, rng).to(dev);
    Tensor att = Tensor::empty({4, 64, 128}, DType::kF32, dev), lse = Tensor::empty({4, 8, 64}, DType::kF32, dev);
    ops::attention_forward(q, kv, kv, {8, 2, true}, nullptr, att, lse);
    Tensor dq = Tensor::empty(q.shape(), DType::kF32, dev), dk = Tensor::empty(kv.shape(), DType::kF32, dev),
           dv = Tensor::empty(kv.shape(), DType::kF32, dev);
    ops::attention_backward(q, q, kv, kv, att, lse, {8, 2, true}, nullptr, dq, dk, dv);
    o.emplace_back("attention_dk", dk);
    o.emplace_back("attention_dv", dv);
    return o;
  };
  const Outputs first = run_once();
  for (int repeat = 0; repeat < 3; ++repeat) {
    const Outputs again = run_once();
    for (std::size_t i = 0; i < first.size(); ++i) {
      SCOPED_TRACE("output '" + first[i].first + "'");
      EXPECT_TRUE(same_bits(again[i].second.to_vector<float>(), first[i].second.to_vector<float>()));
    }
  }
}

}  // namespace
}  // namespace ht
