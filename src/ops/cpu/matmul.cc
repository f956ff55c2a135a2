// Host GEMM: OpenBLAS sgemm by default, Eigen's own product for comparison.
// Batched calls run one GEMM per batch entry across OpenMP threads; inside a
// parallel region the OpenMP build of OpenBLAS runs single-threaded, so the
// two never oversubscribe the cores.
#include <cblas.h>

#include <Eigen/Core>

#include "ops/backend_ops.h"

namespace ht::ops::cpu {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;

struct Gemm {
  std::int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
};

void gemm_one(const Gemm& g, const float* a, const float* b, float* c, CpuGemmBackend backend) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // empty sum: C = beta * C
    Map cm(c, g.m, g.n);
    if (g.beta == 0.f) cm.setZero(); else cm *= g.beta;
    return;
  }
  if (backend == CpuGemmBackend::kOpenBlas) {
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, int(g.m),
                int(g.n), int(g.k), g.alpha, a, int(g.ta ? g.m : g.k), b, int(g.tb ? g.k : g.n), g.beta, c,
                int(g.n));
    return;
  }
  ConstMap am(a, g.ta ? g.k : g.m, g.ta ? g.m : g.k);
  ConstMap bm(b, g.tb ? g.n : g.k, g.tb ? g.k : g.n);
  Map cm(c, g.m, g.n);
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (g.beta == 0.f) {
      cm.noalias() = g.alpha * (lhs * rhs);
    } else {
      cm *= g.beta;
      cm.noalias() += g.alpha * (lhs * rhs);
    }
  };
  if (g.ta && g.tb) run(am.transpose(), bm.transpose());
  else if (g.ta) run(am.transpose(), bm);
  else if (g.tb) run(am, bm.transpose());
  else run(am, bm);
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& o) {
  const int r = a.ndim() - 2;
  const std::int64_t batch = r == 1 ? a.size(0) : 1;
  const Gemm g{c.size(r), c.size(r + 1), o.trans_a ? a.size(r) : a.size(r + 1), o.trans_a, o.trans_b, o.alpha,
               o.beta};
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();
  const std::int64_t sa = g.m * g.k, sb = g.k * g.n, sc = g.m * g.n;
  const CpuGemmBackend backend = cpu_gemm_backend();
  if (batch == 1) {
    gemm_one(g, pa, pb, pc, backend);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < batch; ++i) gemm_one(g, pa + i * sa, pb + i * sb, pc + i * sc, backend);
}

}  // namespace ht::ops::cpu
