// tape_bench: what deriving a backward from the tape costs, forward +
// backward of one micro-batch, twins in alternating rounds in one process,
// each one's median and the ratio:
//   Block  GPT's Block (hand-written backward) against its forward-only twin
//          (the same children, the residual adds on the tape): the tape's
//          own cost;
//   MLP    GPT's MLP (GELU's backward fused with c_fc's bias gradient)
//          against c_fc, gelu, c_proj on the tape: what a user's module
//          built from separate ops gives up to a fused kernel.
// The twins give the same bits (tests/nn/tape_test.cc).
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>
#include <vector>

#include "ht/core/rng.h"
#include "ht/core/version.h"
#include "ht/nn/block.h"
#include "ht/nn/functional.h"
#include "ht/nn/mlp.h"

using namespace ht;

namespace {

class ForwardOnlyBlock : public nn::Module {
 public:
  ForwardOnlyBlock(std::int64_t dim, int heads)
      : Module("block"),
        ln_1_(add_module(std::make_unique<nn::LayerNorm>("ln_1", dim, Device::cpu()))),
        attn_(add_module(std::make_unique<nn::CausalSelfAttention>("attn", dim, heads, Device::cpu()))),
        ln_2_(add_module(std::make_unique<nn::LayerNorm>("ln_2", dim, Device::cpu()))),
        mlp_(add_module(std::make_unique<nn::MLP>("mlp", dim, 4 * dim, Device::cpu()))) {}

 protected:
  nn::Var compute(const nn::Var& x) override {
    const nn::Var h = x + attn_(ln_1_(x));
    return h + mlp_(ln_2_(h));
  }

 private:
  nn::LayerNorm& ln_1_;
  nn::CausalSelfAttention& attn_;
  nn::LayerNorm& ln_2_;
  nn::MLP& mlp_;
};

class ForwardOnlyMlp : public nn::Module {
 public:
  explicit ForwardOnlyMlp(std::int64_t dim)
      : Module("mlp"),
        fc_(add_module(std::make_unique<nn::Linear>("c_fc", dim, 4 * dim, true, Device::cpu()))),
        proj_(add_module(std::make_unique<nn::Linear>("c_proj", 4 * dim, dim, true, Device::cpu()))) {}

 protected:
  nn::Var compute(const nn::Var& x) override { return proj_(nn::gelu(fc_(x))); }

 private:
  nn::Linear& fc_;
  nn::Linear& proj_;
};

Tensor uniform(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  Rng rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 2.f * rng.uniform() - 1.f;
  return t;
}

/// Milliseconds of `iters` forward + backward passes of `m`.
double time_passes(nn::Module& m, const Tensor& x, const Tensor& dy, int iters) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    nn::Context ctx;
    m.forward(ctx, x);
    m.backward(ctx, dy);
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t dim = 384, seq = 256, batch = 4;
  int heads = 6, rounds = 7, iters = 5;
  CLI::App app{"Forward-only (tape) against hand-written backward: GPT's Block and MLP, forward + backward."};
  app.add_option("--dim", dim, "model width");
  app.add_option("--heads", heads, "attention heads");
  app.add_option("--seq", seq, "sequence length");
  app.add_option("--batch", batch, "rows per micro-batch");
  app.add_option("--rounds", rounds, "alternating rounds (the median is reported)");
  app.add_option("--iters", iters, "passes per round and variant");
  CLI11_PARSE(app, argc, argv);

  std::printf("# tape_bench, %s, OpenBLAS %s, %d threads\n", build_description().c_str(), openblas_get_corename(),
              omp_get_max_threads());
  std::printf("# C%lld H%d, micro-batch %lld x %lld tokens, %d rounds of %d passes, alternating\n",
              (long long)dim, heads, (long long)batch, (long long)seq, rounds, iters);
  nn::Block block("block", dim, heads, Device::cpu());
  ForwardOnlyBlock block_tape(dim, heads);
  nn::MLP mlp("mlp", dim, 4 * dim, Device::cpu());
  ForwardOnlyMlp mlp_tape(dim);
  const Tensor x = uniform({batch, seq, dim}, 2), dy = uniform({batch, seq, dim}, 3);
  std::printf("%-8s %14s %14s %8s\n", "module", "hand ms/pass", "tape ms/pass", "ratio");
  for (auto [name, hand, tape] : {std::tuple<const char*, nn::Module*, nn::Module*>{"Block", &block, &block_tape},
                                  {"MLP", &mlp, &mlp_tape}}) {
    auto hp = hand->parameters(), tp = tape->parameters();
    for (std::size_t i = 0; i < hp.size(); ++i) {
      hp[i]->data().copy_from(hp[i]->initial_value(1));
      tp[i]->data().copy_from(hp[i]->data());
    }
    time_passes(*hand, x, dy, 1);  // warm-up: the host cache, OpenBLAS's buffers
    time_passes(*tape, x, dy, 1);
    std::vector<double> hand_ms, tape_ms;
    for (int r = 0; r < rounds; ++r) {
      // Alternating which goes first, so drifts in the machine's speed fall on both.
      if (r % 2 == 0) {
        hand_ms.push_back(time_passes(*hand, x, dy, iters));
        tape_ms.push_back(time_passes(*tape, x, dy, iters));
      } else {
        tape_ms.push_back(time_passes(*tape, x, dy, iters));
        hand_ms.push_back(time_passes(*hand, x, dy, iters));
      }
    }
    const double h = median(hand_ms), t = median(tape_ms);
    std::printf("%-8s %14.3f %14.3f %8.3f\n", name, h, t, t / h);
  }
  return 0;
}
