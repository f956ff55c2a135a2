// moe_bench: nn::MoE's forward + backward on one micro-batch of tokens, the
// median over rounds, as one JSON line for bench/moe_layer.py, which times
// the same layer in PyTorch on the same shapes and threads beside it.
//
//   moe_bench [--tokens 2048] [--dim 512] [--hidden 1024] [--experts 8] [--top-k 2] [--rounds 7] [--iters 3]
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ht/core/rng.h"
#include "ht/core/version.h"
#include "ht/nn/moe.h"

using namespace ht;

namespace {

Tensor normal(const Shape& shape, Rng& rng, float scale) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * rng.normal();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  nn::MoEOptions o{.dim = 512, .hidden = 1024, .experts = 8, .top_k = 2, .aux_loss_coeff = 0.01f};
  std::int64_t tokens = 2048;
  int rounds = 7, iters = 3;
  CLI::App app{"nn::MoE forward + backward, the median of rounds, as one JSON line."};
  app.add_option("--tokens", tokens, "tokens in the micro-batch")->capture_default_str();
  app.add_option("--dim", o.dim, "token width")->capture_default_str();
  app.add_option("--hidden", o.hidden, "each expert's hidden width")->capture_default_str();
  app.add_option("--experts", o.experts, "routed experts")->capture_default_str();
  app.add_option("--top-k", o.top_k, "experts per token")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds (the median is reported)")->capture_default_str();
  app.add_option("--iters", iters, "passes per round")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::printf("# moe_bench, %s, OpenBLAS %s, %d threads\n", build_description().c_str(), openblas_get_corename(),
              omp_get_max_threads());
  nn::MoE moe("moe", o, Device::cpu());
  Rng rng(1);
  for (nn::Parameter* p : moe.parameters())
    p->data().copy_from(normal(p->data().shape(), rng, 1.f / std::sqrt(float(p->data().size(-1)))));
  const Tensor x = normal({tokens, o.dim}, rng, 1.f), dy = normal({tokens, o.dim}, rng, 1.f);
  const auto pass = [&] {
    nn::Context ctx;
    ctx.set_aux_loss_grad_scale(1.f);
    moe.discard_grads();  // as the engine: the backward overwrites them (PyTorch's grad = None)
    moe.forward(ctx, x);
    moe.backward(ctx, dy);
  };
  pass();  // warm-up: OpenBLAS's buffers, the host cache
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) pass();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("{\"tokens\": %lld, \"dim\": %lld, \"hidden\": %lld, \"experts\": %d, \"top_k\": %d, \"ms\": %.3f}\n",
              (long long)tokens, (long long)o.dim, (long long)o.hidden, o.experts, o.top_k, ms[ms.size() / 2]);
  return 0;
}
