// The plan layer: model specs against the models, the memory model against
// the allocator's accounting of a real forward, the time model's formulas,
// the search's constraints and speed, and the profile file's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <numeric>

#include "ht/core/memory.h"
#include "ht/models/gpt.h"
#include "ht/models/llama.h"
#include "ht/models/presets.h"
#include "ht/nn/context.h"
#include "ht/parallel/schedule.h"
#include "ht/plan/search.h"
#include "test_util.h"

namespace ht {
namespace {

using nn::Recompute;

models::GPTConfig tiny_gpt() {
  return {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 2, .n_embd = 32};
}
models::LlamaConfig tiny_llama() {
  return {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
          .ffn_hidden = 48};
}

/// A made-up cluster, as a file would give it.
plan::MachineProfile cluster(double memory_gib = 80, int per_node = 8) {
  plan::MachineProfile p;
  p.name = "test cluster";
  p.memory_gib = memory_gib;
  p.ranks_per_node = per_node;
  p.rates["fp32"] = {.gemm_gflops = 50000, .attention_gflops = 25000};
  p.rates["bf16"] = {.gemm_gflops = 600000, .attention_gflops = 300000};
  p.memory_gbps = 3000;
  p.intra_node = {.latency_us = 3, .gbps = 300};
  p.inter_node = {.latency_us = 10, .gbps = 40};
  return p;
}

TEST(ModelSpec, ParameterCountsMatchTheModels) {
  for (std::int64_t mult : {1, 128}) {
    models::GPTConfig g = tiny_gpt();
    g.vocab_multiple = mult;
    EXPECT_EQ(g.spec(16).num_parameters(), g.num_parameters());
    EXPECT_EQ(g.spec(16).num_parameters(), models::GPT(g).num_parameters());
    models::LlamaConfig l = tiny_llama();
    l.vocab_multiple = mult;
    EXPECT_EQ(l.spec(16).num_parameters(), l.num_parameters());
    EXPECT_EQ(l.spec(16).num_parameters(), models::Llama(l).num_parameters());
    l.tie_embeddings = true;  // one vocabulary matrix, the head's the embedding's
    EXPECT_EQ(l.spec(16).num_parameters(), l.num_parameters());
    EXPECT_EQ(l.spec(16).num_parameters(), models::Llama(l).num_parameters());
    l.qkv_bias = true;  // Qwen2's biases on q, k and v
    EXPECT_EQ(l.spec(16).num_parameters(), l.num_parameters());
    EXPECT_EQ(l.spec(16).num_parameters(), models::Llama(l).num_parameters());
  }
  const nn::ModelSpec s = tiny_gpt().spec(16);
  EXPECT_EQ(s.num_blocks(), 3);
  EXPECT_EQ(s.first_block(), 1);
  EXPECT_TRUE(s.splits_over(2));
  EXPECT_FALSE(s.splits_over(3));  // 2 heads
  // Forward matmul FLOPs: 2 per weight-matrix element (12 C^2 a block, the head's V C), no more.
  double fwd = 0, attn = 0;
  for (const nn::LayerSpec& l : s.layers) fwd += l.gemm_flops, attn += l.attention_flops;
  EXPECT_DOUBLE_EQ(fwd, 2.0 * (3 * 12 * 32 * 32 + 64 * 32));
  EXPECT_DOUBLE_EQ(attn, 3 * 2.0 * 16 * 32);
}

/// Activation bytes a real forward (with its loss) leaves held, as the allocator counts them.
template <typename Model, typename Config>
std::int64_t measured_forward_bytes(const Config& config, std::int64_t batch, std::int64_t seq, DType dtype,
                                    Recompute mode) {
  Model model(config);
  model.init_weights(1);
  model.set_recompute(mode);
  std::vector<std::int32_t> ids(std::size_t(batch * seq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 7 + 3) % 64);
  const Tensor tokens = Tensor::from_vector(ids, {batch, seq});
  const Tensor targets = Tensor::from_vector(ids, {batch, seq});
  (void)dtype;
  nn::Context ctx;
  const std::int64_t before = memory_stats(DeviceType::kCPU, MemCategory::kActivations).current_bytes;
  model.forward_loss(ctx, tokens, targets);
  const std::int64_t after = memory_stats(DeviceType::kCPU, MemCategory::kActivations).current_bytes;
  return after - before;
}

/// What the spec says one process keeps after a forward of `tokens` tokens
/// (the token ids and targets are the caller's tensors, not activations).
double spec_forward_bytes(const nn::ModelSpec& s, double tokens, Recompute mode) {
  double kept = 0;
  for (const nn::LayerSpec& l : s.layers)
    kept += l.saved[std::size_t(l.role == nn::LayerRole::kBlock ? int(mode) : 0)].bytes(1, 4.0);
  return tokens * (kept - 2 * 4.0);
}

TEST(MemoryModel, ActivationsAreWhatAForwardKeeps) {
  for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(nn::recompute_name(mode));
    const std::int64_t b = 2, t = 16;
    const std::int64_t gpt = measured_forward_bytes<models::GPT>(tiny_gpt(), b, t, DType::kF32, mode);
    EXPECT_EQ(double(gpt), spec_forward_bytes(tiny_gpt().spec(t), double(b * t), mode));
    const std::int64_t llama = measured_forward_bytes<models::Llama>(tiny_llama(), b, t, DType::kF32, mode);
    EXPECT_EQ(double(llama), spec_forward_bytes(tiny_llama().spec(t), double(b * t), mode));
  }
}

// The memory model counts the schedule tables' own peak (parallel::
// stage_actions, what the pipeline executes); these are its known values.
TEST(MemoryModel, InFlightIsTheScheduleTablesPeak) {
  for (parallel::Schedule s : {parallel::Schedule::k1F1B, parallel::Schedule::kGPipe, parallel::Schedule::kZeroBubbleH1})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 9; ++m)
        for (int st = 0; st < p; ++st)
          EXPECT_EQ(plan::in_flight(s, st, p, m), s == parallel::Schedule::kGPipe ? m : std::min(p - st, m))
              << parallel::schedule_name(s) << " p" << p << " m" << m << " s" << st;
  // Interleaved: (micro-batch, chunk) pairs.
  for (int p = 2; p <= 5; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 3 * p; m += p)
        for (int st = 0; st < p; ++st)
          EXPECT_EQ(plan::in_flight(parallel::Schedule::kInterleaved, st, p, m, v),
                    std::min(v * m, (v + 1) * p - 1 - 2 * st))
              << "interleaved p" << p << " v" << v << " m" << m << " s" << st;
}

// The schedules beyond 1F1B in the memory model: ZB-H1 holds 1F1B's
// micro-batches and, for the newest, what its B leaves for W; an
// interleaved rank holds its chunks' parameters (together the whole model's)
// and chunk activations as its table says. ZeRO-3 with interleaved, and an
// accumulation the ranks do not divide, are refused as the engine refuses them.
TEST(MemoryModel, ZeroBubbleAndInterleavedStages) {
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 256, .context = 128, .n_layer = 8, .n_head = 4,
                                            .n_embd = 256}
                              .spec(128);
  plan::LayoutChoice l{{.tp = 1, .pp = 2, .dp = 1, .micro_batch = 2, .grad_accum = 4}};
  const std::vector<plan::StageMemory> one = plan::estimate_memory(s, l);
  l.schedule = parallel::Schedule::kZeroBubbleH1;
  const std::vector<plan::StageMemory> zb = plan::estimate_memory(s, l);
  for (int st = 0; st < 2; ++st) {
    EXPECT_EQ(zb[std::size_t(st)].in_flight, one[std::size_t(st)].in_flight);
    EXPECT_GE(zb[std::size_t(st)].of(MemCategory::kActivations), one[std::size_t(st)].of(MemCategory::kActivations));
    EXPECT_EQ(zb[std::size_t(st)].of(MemCategory::kParameters), one[std::size_t(st)].of(MemCategory::kParameters));
  }
  // A GPT block's B frees about what it defers (the paper's "1F1B's
  // memory"); under full recomputation a block keeps only its input, and
  // what B defers for W is far more.
  l.recompute = Recompute::kFull;
  const double zb_full = plan::estimate_memory(s, l)[0].of(MemCategory::kActivations);
  l.schedule = parallel::Schedule::k1F1B;
  EXPECT_GT(zb_full, 1.5 * plan::estimate_memory(s, l)[0].of(MemCategory::kActivations));
  l.recompute = Recompute::kNone;
  l.schedule = parallel::Schedule::kInterleaved;
  l.virtual_stages = 2;
  EXPECT_EQ(l.str(), "tp1 pp2 dp1 zero0 mb2x4 interleaved v2");
  const std::vector<plan::StageMemory> il = plan::estimate_memory(s, l);
  EXPECT_DOUBLE_EQ(il[0].of(MemCategory::kParameters) + il[1].of(MemCategory::kParameters),
                   one[0].of(MemCategory::kParameters) + one[1].of(MemCategory::kParameters));
  EXPECT_EQ(il[0].blocks + il[1].blocks, 8);
  EXPECT_EQ(il[0].in_flight, 5);  // min(v m, (v + 1) p - 1 - 2 s)
  EXPECT_EQ(il[1].in_flight, 3);
  l.zero = 3;
  l.dp = 2;
  EXPECT_TRUE(test::throws_error([&] { plan::estimate_memory(s, l); }, ErrorKind::kConfig,
                                 {"layout tp1 pp2 dp2 zero3 mb2x4 interleaved v2: --schedule interleaved with --zero 3 is not supported"}));
  l.zero = 0;
  l.grad_accum = 3;
  EXPECT_THROW(plan::estimate_memory(s, l), Error);
}

// ZeRO-3 without accumulation: a unit's full gradients live while backward
// writes them and while the one before is reduce-scattered, so two
// consecutive units at most; but the last stage's head uses the first
// stage's wte, and that gradient is reduced with the first stage's only when
// the step's gradients are finished, so it stays whole all backward. (The
// allocator measured 10,264,576 bytes on this stage, ht-plan-bench.)
TEST(MemoryModel, Zero3KeepsTheTiedHeadsGradientWhole) {
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 512, .context = 128, .n_layer = 4, .n_head = 4,
                                            .n_embd = 256}
                              .spec(128);
  const plan::LayoutChoice l{{.tp = 1, .pp = 2, .dp = 2, .zero = 3, .micro_batch = 8, .grad_accum = 1}};
  const std::vector<int> last = plan::layers_by_stage(s, l).at(1);
  ASSERT_GE(s.layers[std::size_t(last.back())].shares_with, 0) << "the last layer is the tied head";
  double params = 0, head = 0, pair = 0, previous = 0;
  for (int i : last) {
    const double n = plan::layer_params(s, last, i, 1);
    params += n;
    if (i == last.back()) {
      head = n;
      continue;
    }
    pair = std::max(pair, previous + n);
    previous = n;
  }
  ASSERT_GT(head, 0);
  const double shard = plan::state_bytes_per_parameter(3, 2, l.precision).grads * params;
  EXPECT_DOUBLE_EQ(plan::estimate_memory(s, l)[1].of(MemCategory::kGradients), shard + 4.0 * (pair + head));
}

// ZeRO-3 under bf16 (f32 reductions): the unit being written holds its
// bf16 gradients, the one before it its bf16 ones and their f32 copy until
// that reduce-scatter is done; with accumulation all bf16 gradients stay and
// one f32 copy at a time comes on top (DataParallel finishes the unit before
// before it makes the next copy). The figures are the allocator's step peaks
// on every rank, measured by ht-plan-bench -np 4 --precision bf16 (the model
// said 38 % and 24 % more before it knew the copies' lifetimes).
TEST(MemoryModel, Zero3MixedPrecisionGradientsAsMeasured) {
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 512, .context = 128, .n_layer = 4, .n_head = 4,
                                            .n_embd = 256}
                              .spec(128);
  const precision::Policy bf16{.compute = DType::kBF16, .reduce = DType::kF32};
  plan::LayoutChoice l{{.tp = 1, .pp = 1, .dp = 4, .zero = 3, .micro_batch = 4, .grad_accum = 1}, nn::Recompute::kNone, bf16};
  EXPECT_NEAR(plan::estimate_memory(s, l)[0].of(MemCategory::kGradients), 9969152.0, 9969152.0 * 1e-3);
  l.micro_batch = 1, l.grad_accum = 4;
  EXPECT_NEAR(plan::estimate_memory(s, l)[0].of(MemCategory::kGradients), 13128192.0, 13128192.0 * 1e-3);
}

TEST(MemoryModel, StateBytesPerParameter) {
  const precision::Policy f32{}, bf16{.compute = DType::kBF16, .reduce = DType::kF32};
  EXPECT_DOUBLE_EQ(plan::state_bytes_per_parameter(0, 4, f32).total(), 16.0);
  EXPECT_DOUBLE_EQ(plan::state_bytes_per_parameter(3, 4, f32).total(), 4.0);
  EXPECT_DOUBLE_EQ(plan::state_bytes_per_parameter(0, 4, bf16).total(), 20.0);
  EXPECT_DOUBLE_EQ(plan::state_bytes_per_parameter(3, 4, bf16).total(), 18.0 / 4);
  EXPECT_DOUBLE_EQ(plan::state_bytes_per_parameter(1, 2, f32).optim, 4.0);
}

TEST(MemoryModel, PerStageNotAveraged) {
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 50257, .context = 1024, .n_layer = 12, .n_head = 12,
                                            .n_embd = 768, .vocab_multiple = 128}
                              .spec(1024);
  plan::LayoutChoice l{{.tp = 1, .pp = 4, .dp = 1, .micro_batch = 2, .grad_accum = 8}};
  const std::vector<plan::StageMemory> m = plan::estimate_memory(s, l);
  ASSERT_EQ(m.size(), 4u);
  // 1F1B: stage s holds p - s micro-batches; the last holds the logits and the head's wte copy.
  EXPECT_EQ(m[0].in_flight, 4);
  EXPECT_EQ(m[3].in_flight, 1);
  EXPECT_GT(m[0].of(MemCategory::kActivations), 3.0 * m[2].of(MemCategory::kActivations) / 2.0 * 0.9);
  EXPECT_GT(m[3].of(MemCategory::kParameters), m[1].of(MemCategory::kParameters));
  EXPECT_GT(m[0].of(MemCategory::kParameters), m[1].of(MemCategory::kParameters));
  // GPipe holds all 8 everywhere.
  l.schedule = parallel::Schedule::kGPipe;
  EXPECT_EQ(plan::estimate_memory(s, l)[3].in_flight, 8);
  // Recomputation keeps less, in order; tp divides the split part.
  l = {{.tp = 1, .pp = 1, .dp = 1, .micro_batch = 4}};
  double act[3];
  for (int r = 0; r < 3; ++r) {
    l.recompute = Recompute(r);
    act[r] = plan::estimate_memory(s, l)[0].of(MemCategory::kActivations);
  }
  EXPECT_GT(act[0], act[1]);
  EXPECT_GT(act[1], 2 * act[2]);
  l.recompute = Recompute::kNone;
  l.tp = 4;
  EXPECT_LT(plan::estimate_memory(s, l)[0].of(MemCategory::kActivations), 0.6 * act[0]);
  // ZeRO-3 over 8 ranks holds about an eighth of the state.
  l = {{.tp = 1, .pp = 1, .dp = 8, .zero = 3, .micro_batch = 1}};
  const auto z3 = plan::estimate_memory(s, l)[0];
  l.zero = 0;
  const auto z0 = plan::estimate_memory(s, l)[0];
  EXPECT_LT(z3.of(MemCategory::kOptimizerState), z0.of(MemCategory::kOptimizerState) / 7.9);
  // Uneven splits are what they say.
  l = {{.tp = 1, .pp = 3, .dp = 1, .micro_batch = 1, .grad_accum = 3, .stage_layers = {2, 6, 4}}};
  const auto uneven = plan::estimate_memory(s, l);
  EXPECT_EQ(uneven[0].blocks, 2);
  EXPECT_EQ(uneven[1].first_block, 2);
  EXPECT_EQ(uneven[2].blocks, 4);
  l.stage_layers = {2, 6, 3};
  EXPECT_TRUE(test::throws_error([&] { plan::estimate_memory(s, l); }, ErrorKind::kConfig, {"sums to 11 layers but the model has 12"}));
}

TEST(TimeModel, RingFormulas) {
  const plan::Link link{.latency_us = 10, .gbps = 1};
  EXPECT_DOUBLE_EQ(plan::all_reduce_ms(1e9, 1, link), 0.0);
  // 2 (g - 1) / g x bytes / bandwidth + 2 (g - 1) latency.
  EXPECT_NEAR(plan::all_reduce_ms(1e9, 4, link), 1.5e3 + 6 * 0.01, 1e-9);
  EXPECT_NEAR(plan::reduce_scatter_ms(1e9, 4, link), 0.75e3 + 3 * 0.01, 1e-9);
  EXPECT_NEAR(plan::p2p_ms(1e6, link), 1.0 + 0.01, 1e-9);
}

TEST(TimeModel, PipelineBubbleAndRecomputation) {
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 256, .context = 256, .n_layer = 8, .n_head = 8,
                                            .n_embd = 512}
                              .spec(256);
  const plan::MachineProfile prof = cluster();
  plan::LayoutChoice l{{.tp = 1, .pp = 4, .dp = 1, .micro_batch = 1, .grad_accum = 4, .stage_layers = {2, 2, 2, 2}}};
  const plan::TimeEstimate t4 = plan::estimate_time(s, l, prof);
  l.grad_accum = 16;
  const plan::TimeEstimate t16 = plan::estimate_time(s, l, prof);
  // Nearly equal stages: the bubble is about (p - 1) / (m + p - 1).
  EXPECT_NEAR(t4.bubble, 3.0 / 7.0, 0.06);
  EXPECT_NEAR(t16.bubble, 3.0 / 19.0, 0.04);
  l = {{.tp = 1, .pp = 1, .dp = 1, .micro_batch = 4}};
  const double none = plan::estimate_time(s, l, prof).step_ms;
  l.recompute = Recompute::kSelective;
  const double selective = plan::estimate_time(s, l, prof).step_ms;
  l.recompute = Recompute::kFull;
  const double full = plan::estimate_time(s, l, prof).step_ms;
  EXPECT_LT(none, selective);
  EXPECT_LT(selective, full);
  EXPECT_NEAR(full / none, 4.0 / 3.0, 0.1);  // one more forward of three units of work

  // Interleaved and ZB-H1 idle less than 1F1B, by what the simulator finds
  // in the tables the executor runs (p 4, m 8: 0.30 for 1F1B, 0.25 for
  // ZB-H1, 0.22 interleaved over 2 chunks; the closed forms promised 0.5x).
  l = {{.tp = 1, .pp = 4, .dp = 1, .micro_batch = 1, .grad_accum = 8}};
  const plan::TimeEstimate base = plan::estimate_time(s, l, prof);
  l.schedule = parallel::Schedule::kZeroBubbleH1;
  const plan::TimeEstimate zb = plan::estimate_time(s, l, prof);
  l.schedule = parallel::Schedule::kInterleaved;
  l.virtual_stages = 2;
  const plan::TimeEstimate il = plan::estimate_time(s, l, prof);
  EXPECT_LT(zb.bubble, 0.9 * base.bubble);
  EXPECT_LT(il.bubble, 0.8 * base.bubble);
  EXPECT_LT(zb.step_ms, base.step_ms);
  EXPECT_LT(il.step_ms, base.step_ms);
}

// The bubble is the schedule simulator's on the executor's tables: equal
// stages give 1F1B's and GPipe's (p - 1) / (m + p - 1) up to the
// transfers' ticks, and the extrapolation past the steady state agrees with
// a whole simulation.
TEST(TimeModel, PipelineBubbleIsTheSimulators) {
  using parallel::Schedule;
  for (Schedule sch : {Schedule::k1F1B, Schedule::kGPipe})
    for (int p : {2, 4, 8})
      for (int m : {1, 4, 16}) {
        const double b = plan::pipeline_bubble(sch, p, m, 1, 1.0, 2.0, 1.0);
        const double ideal = double(p - 1) / double(m + p - 1);
        EXPECT_GE(b, ideal - 1e-9) << parallel::schedule_name(sch) << " p " << p << " m " << m;
        EXPECT_LE(b, ideal + 0.05) << parallel::schedule_name(sch) << " p " << p << " m " << m;
      }
  // m 64 at p 4 is extrapolated from m 8 and 12: the same as simulating all
  // 64. F 1 and B 3 of which W 1.5: shares on the grid, in ticks of 1/64 of
  // a micro-batch (a chunk's half of them under v 2).
  const int p = 4, m = 64;
  for (Schedule sch : {Schedule::k1F1B, Schedule::kZeroBubbleH1, Schedule::kInterleaved}) {
    const int v = sch == Schedule::kInterleaved ? 2 : 1;
    const parallel::SimCosts c{.forward_ticks = 16 / v, .backward_ticks = 48 / v, .backward_input_ticks = 24 / v,
                               .backward_weight_ticks = 24 / v};
    std::vector<std::vector<parallel::Action>> tables;
    for (int s = 0; s < p; ++s) tables.push_back(parallel::stage_actions(sch, s, p, m, v));
    const double whole = 1.0 - double(m) * v * (c.forward_ticks + c.backward_ticks) /
                                   double(parallel::simulate(tables, c).ticks);
    EXPECT_NEAR(plan::pipeline_bubble(sch, p, m, v, 1.0, 3.0, 1.5), whole, 1e-9) << parallel::schedule_name(sch);
  }
  EXPECT_EQ(plan::pipeline_bubble(Schedule::k1F1B, 1, 8, 1, 1.0, 2.0, 1.0), 0.0);
}

// Interleaved and ZB-H1 are searched only when asked for, with the engine's limits.
TEST(Search, OffersTheNewSchedulesWhenAskedFor) {
  plan::PlanRequest rq;
  rq.model = models::GPTConfig{.vocab_size = 256, .context = 128, .n_layer = 8, .n_head = 4, .n_embd = 256}.spec(128);
  rq.profile = cluster();
  rq.world = 8;
  rq.global_batch = 16;
  rq.pp = {4};
  const plan::PlanResult plain = plan::search_plans(rq, 1000);
  for (const plan::Plan& p : plain.plans)
    EXPECT_TRUE(p.layout.schedule == parallel::Schedule::k1F1B || p.layout.schedule == parallel::Schedule::kGPipe)
        << p.layout.str();
  rq.schedules = {parallel::Schedule::kInterleaved, parallel::Schedule::kZeroBubbleH1};
  const plan::PlanResult asked = plan::search_plans(rq, 1000);
  int interleaved = 0, zb = 0;
  for (const plan::Plan& p : asked.plans) {
    if (p.layout.schedule == parallel::Schedule::kInterleaved) {
      ++interleaved;
      EXPECT_EQ(p.layout.virtual_stages, 2);
      EXPECT_EQ(p.layout.grad_accum % 4, 0) << p.layout.str();
      EXPECT_LT(p.layout.zero, 3) << p.layout.str();
      if (!p.layout.stage_layers.empty()) EXPECT_EQ(p.layout.stage_layers.size(), 8u);
    } else {
      ++zb;
      EXPECT_EQ(p.layout.schedule, parallel::Schedule::kZeroBubbleH1);
    }
  }
  EXPECT_GT(interleaved, 0);
  EXPECT_GT(zb, 0);
  // The reasons say what the schedule not chosen would have given.
  const std::string other = asked.plans.front().layout.schedule == parallel::Schedule::kInterleaved
                                ? "schedule zb-h1: best is"
                                : "schedule interleaved: best is";
  EXPECT_NE(std::find_if(asked.reasons.begin(), asked.reasons.end(),
                         [&](const std::string& r) { return r.rfind(other, 0) == 0; }),
            asked.reasons.end())
      << fmt::format("{}", fmt::join(asked.reasons, "\n"));
}

TEST(Search, BalancesStagesWithTheHeadCounted) {
  // A large vocabulary makes the last stage's head heavy: the balanced split gives it fewer blocks.
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 50257, .context = 1024, .n_layer = 16, .n_head = 12,
                                            .n_embd = 768, .vocab_multiple = 128}
                              .spec(1024);
  const plan::LayoutChoice l{{.tp = 1, .pp = 4, .dp = 1, .micro_batch = 1, .grad_accum = 8}};
  const std::vector<int> split = plan::balanced_stage_layers(s, l, cluster());
  ASSERT_EQ(split.size(), 4u);
  EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), 16);
  EXPECT_LT(split[3], 4);
  plan::LayoutChoice by_count = l, balanced = l;
  balanced.stage_layers = split;
  EXPECT_LT(plan::estimate_time(s, balanced, cluster()).step_ms, plan::estimate_time(s, by_count, cluster()).step_ms);
}

/// GPT-2 small (124M, padded vocabulary) at `seq` tokens a row on the test
/// cluster with `memory_gib` per rank.
plan::PlanRequest gpt2_small(std::int64_t seq, double memory_gib, int world, std::int64_t global_batch) {
  plan::PlanRequest rq;
  rq.model = models::GPTConfig{.vocab_size = 50257, .context = seq, .n_layer = 12, .n_head = 12, .n_embd = 768,
                               .vocab_multiple = 128}
                 .spec(seq);
  rq.profile = cluster(memory_gib);
  rq.world = world;
  rq.global_batch = global_batch;
  return rq;
}

TEST(Search, FitsTheBudgetAndExplains) {
  plan::PlanRequest rq = gpt2_small(/*seq=*/1024, /*memory_gib=*/4, /*world=*/8, /*global_batch=*/32);
  const plan::PlanResult r = plan::search_plans(rq, 5);
  ASSERT_FALSE(r.plans.empty());
  EXPECT_LE(r.plans.size(), 5u);
  for (const plan::Plan& p : r.plans) {
    EXPECT_LE(p.peak_bytes, r.budget_bytes);
    EXPECT_EQ(p.layout.world(), 8);
    EXPECT_EQ(p.layout.global_batch(), 32);
  }
  for (std::size_t i = 1; i < r.plans.size(); ++i) EXPECT_LE(r.plans[i - 1].time.step_ms, r.plans[i].time.step_ms);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons[0].find("wins"), std::string::npos);
  EXPECT_NE(plan::format_plans(r, rq).find("memory per stage"), std::string::npos);
  EXPECT_NE(plan::plans_to_json(r, rq).find("\"stage_layers\""), std::string::npos);
  // Deterministic.
  EXPECT_EQ(plan::plans_to_json(plan::search_plans(rq, 5), rq).substr(0, 200), plan::plans_to_json(r, rq).substr(0, 200));
  // Nothing fits: a clear error saying what the smallest layout needs.
  rq.profile = cluster(/*memory_gib=*/0.01);
  EXPECT_TRUE(test::throws_error([&] { plan::search_plans(rq); }, ErrorKind::kConfig, {"the smallest needs"}));
}

TEST(Search, ContextParallelismForSequencesTooLongForOneRank) {
  // GPT-2 small at 16,384 tokens a row, no recomputation, tp and pp held at
  // 1: one rank cannot hold a row's activations in 4 GiB; cp divides them.
  plan::PlanRequest rq = gpt2_small(/*seq=*/16384, /*memory_gib=*/4, /*world=*/8, /*global_batch=*/8);
  rq.precision = {.compute = DType::kBF16, .reduce = DType::kF32};
  rq.tp = {1}, rq.pp = {1};
  rq.recompute = {Recompute::kNone};
  const plan::PlanResult r = plan::search_plans(rq, 3);
  ASSERT_FALSE(r.plans.empty());
  const plan::LayoutChoice& best = r.plans[0].layout;
  EXPECT_GT(best.cp, 1) << plan::format_plans(r, rq);
  EXPECT_EQ(best.world(), 8);
  EXPECT_EQ(rq.model.seq_len % (2 * best.cp), 0);
  EXPECT_NE(plan::plans_to_json(r, rq).find("\"cp\": " + std::to_string(best.cp)), std::string::npos);
  EXPECT_GT(r.plans[0].time.stages[0].cp_comm_ms, 0);
  // The activations are the cp-th part of cp1's, plus one block's whole
  // sequence of keys and values and a gather buffer.
  plan::LayoutChoice one = best;
  one.cp = 1;
  one.dp = best.dp * best.cp;
  const double act = plan::estimate_memory(rq.model, best)[0].of(MemCategory::kActivations);
  const double act1 = plan::estimate_memory(rq.model, one)[0].of(MemCategory::kActivations);
  const double kv = 3.0 * double(best.micro_batch) * 16384 * 768 * 2;
  EXPECT_NEAR(act, act1 / best.cp + kv, 1e-6 * act);
  // Held at cp 1, nothing fits.
  rq.cp = {1};
  EXPECT_TRUE(test::throws_error([&] { plan::search_plans(rq); }, ErrorKind::kConfig, {"the smallest needs"}));
}

TEST(Search, TpAcrossNodesIsNamed) {
  plan::PlanRequest rq;
  rq.model = models::GPTConfig{.vocab_size = 50257, .context = 2048, .n_layer = 96, .n_head = 96, .n_embd = 12288,
                               .vocab_multiple = 128}
                 .spec(2048);
  rq.profile = cluster(80, 8);
  rq.world = 1024;
  rq.global_batch = 512;
  rq.precision = {.compute = DType::kBF16, .reduce = DType::kF32};
  const plan::PlanResult r = plan::search_plans(rq, 3);
  ASSERT_FALSE(r.plans.empty());
  EXPECT_LE(r.plans[0].layout.tp, 8);
  bool named = false;
  for (const std::string& why : r.reasons) named |= why.find("tp 16 (crosses the node boundary") != std::string::npos;
  EXPECT_TRUE(named) << plan::format_plans(r, rq);
}

TEST(Search, FastForA96LayerModelOn4096Ranks) {
  plan::PlanRequest rq;
  rq.model = models::GPTConfig{.vocab_size = 50257, .context = 2048, .n_layer = 96, .n_head = 96, .n_embd = 12288,
                               .vocab_multiple = 128}
                 .spec(2048);
  rq.profile = cluster(80, 8);
  rq.world = 4096;
  rq.global_batch = 1536;
  rq.precision = {.compute = DType::kBF16, .reduce = DType::kF32};
  const auto t0 = std::chrono::steady_clock::now();
  const plan::PlanResult r = plan::search_plans(rq, 3);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.plans.empty());
  EXPECT_GT(r.considered, 1000);
  // The issue's bound is 10 s; a unit test only guards against a blow-up (machines are noisy).
  EXPECT_LT(s, 60.0) << r.considered << " layouts";
}

TEST(Profile, FileErrorsSayWhat) {
  const std::string good = plan::to_json(cluster());
  const plan::MachineProfile back = plan::profile_from_json(good, "good.json");
  EXPECT_EQ(back.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(back.rates_for(DType::kF16).gemm_gflops, 600000);  // falls back to bf16
  EXPECT_TRUE(test::throws_error([] { plan::profile_from_json("{", "p.json"); }, ErrorKind::kConfig, {"not valid JSON"}));
  EXPECT_TRUE(test::throws_error([] { plan::profile_from_json(R"({"memory_gib": 80})", "p.json"); },
                                 ErrorKind::kConfig, {"'ranks_per_node' is missing"}));
  EXPECT_TRUE(test::throws_error([] { plan::load_profile("/nonexistent/profile.json"); }, ErrorKind::kIo,
                                 {"cannot read the machine profile"}));
  std::string unsaid = good;
  const std::size_t at = unsaid.find("\"cores_per_node\": 0,");
  ASSERT_NE(at, std::string::npos) << good;
  unsaid.erase(at, std::string("\"cores_per_node\": 0,").size());
  EXPECT_EQ(plan::profile_from_json(unsaid, "unsaid.json").cores_per_node, 0) << "a file that does not say: a core per rank";
  plan::MachineProfile shared = cluster();
  shared.cores_per_node = 2;
  EXPECT_EQ(plan::profile_from_json(plan::to_json(shared), "shared.json").cores_per_node, 2);
  shared.cores_per_node = -1;
  EXPECT_TRUE(test::throws_error([&] { plan::profile_from_json(plan::to_json(shared), "p.json"); }, ErrorKind::kConfig,
                                 {"cores_per_node -1 must not be negative"}));
}

// More ranks than cores (this 2-core machine at np 4): an idle stage's core
// runs the other ranks, so a pipeline costs the node's work (m mean stages
// at the shared rates), or its critical path at a core each, whichever is
// longer; without a pipeline nothing changes.
TEST(TimeModel, OversubscribedPipelinesCostTheNodesWork) {
  const nn::ModelSpec s = models::GPTConfig{.vocab_size = 256, .context = 128, .n_layer = 8, .n_head = 4,
                                            .n_embd = 256}
                              .spec(128);
  plan::MachineProfile own = cluster(80, 4), shared = own;
  shared.cores_per_node = 2;
  EXPECT_DOUBLE_EQ(own.oversubscription(), 1.0);
  EXPECT_DOUBLE_EQ(shared.oversubscription(), 2.0);
  plan::LayoutChoice l{{.tp = 1, .pp = 4, .dp = 1, .micro_batch = 2, .grad_accum = 8}};
  const plan::TimeEstimate alone = plan::estimate_time(s, l, own), crowded = plan::estimate_time(s, l, shared);
  double sum = 0;
  for (const plan::StageTime& st : crowded.stages) sum += st.total_ms();
  EXPECT_NEAR(crowded.pipeline_ms, std::max(8.0 * sum / 4, alone.pipeline_ms / 2), 1e-9);
  EXPECT_LT(crowded.pipeline_ms, alone.pipeline_ms);
  EXPECT_LT(crowded.bubble, alone.bubble);
  l = {{.tp = 1, .pp = 1, .dp = 4, .micro_batch = 16}};
  EXPECT_DOUBLE_EQ(plan::estimate_time(s, l, shared).step_ms, plan::estimate_time(s, l, own).step_ms);
}

// --- Mixtures of experts and expert parallelism ---------------------------

models::LlamaConfig tiny_moe(int moe_every = 1) {
  models::LlamaConfig c = tiny_llama();
  c.experts = 4, c.top_k = 2, c.shared_experts = 1, c.moe_every = moe_every;
  return c;
}

TEST(ModelSpec, MixtureParameterAndFlopCountsMatchTheModel) {
  for (int every : {1, 2}) {
    SCOPED_TRACE(every);
    const models::LlamaConfig c = tiny_moe(every);
    const nn::ModelSpec s = c.spec(16);
    EXPECT_EQ(s.num_parameters(), c.num_parameters());
    EXPECT_EQ(s.num_parameters(), models::Llama(c).num_parameters());
    EXPECT_EQ(s.active_parameters(), c.active_parameters());
    EXPECT_EQ(s.max_experts(), 4);
    EXPECT_TRUE(s.splits_experts_over(1) && s.splits_experts_over(2) && s.splits_experts_over(4));
    EXPECT_FALSE(s.splits_experts_over(3));
    EXPECT_FALSE(s.splits_experts_over(8));
    // Matmul FLOPs of forward and backward (3 x forward) are the config's
    // 6 x active parameters (no padding rows here) less the embedding's
    // lookup and the norms' weights (2 C a block, C the final one).
    double fwd = 0;
    for (const nn::LayerSpec& l : s.layers) fwd += l.gemm_flops + l.gemm_flops_replicated;
    const double norms = 6.0 * double((2 * c.n_layer + 1) * c.n_embd);
    EXPECT_NEAR(3.0 * fwd, c.flops_per_token(16) - 12.0 * c.n_layer * 16 * c.n_embd - norms, 1e-6 * fwd);
    // The experts are not split over tp: ffn_hidden need not divide it where no dense MLP is.
    int dense = 0;
    for (int i = 0; i < c.n_layer; ++i) dense += c.moe_layer(i) ? 0 : 1;
    EXPECT_EQ(std::count(s.tp_divides.begin(), s.tp_divides.end(), c.ffn_hidden) > 0, dense > 0);
  }
  EXPECT_FALSE(tiny_llama().spec(16).splits_experts_over(2));  // dense: ep 1 only
  EXPECT_EQ(tiny_llama().spec(16).active_parameters(), tiny_llama().num_parameters());
}

// The published sizes: Mixtral 8x7B 46.7B parameters (12.9B active),
// DeepSeekMoE 16B 16.4B (2.8B active; its first layer, dense in the
// original, is a mixture here: a few percent more).
TEST(ModelSpec, MixturePresetsHaveThePublishedSizes) {
  const auto near = [](double got, double want, double share) { return std::abs(got / want - 1.0) <= share; };
  const nn::ModelSpec mixtral = models::spec(models::find_preset("mixtral-8x7b").config, 4096);
  EXPECT_PRED3(near, double(mixtral.num_parameters()), 46.7e9, 0.02);
  EXPECT_PRED3(near, double(mixtral.active_parameters()), 12.9e9, 0.02);
  const nn::ModelSpec deepseek = models::spec(models::find_preset("deepseek-moe-16b").config, 4096);
  EXPECT_PRED3(near, double(deepseek.num_parameters()), 16.4e9, 0.04);
  EXPECT_PRED3(near, double(deepseek.active_parameters()), 2.8e9, 0.04);
  EXPECT_EQ(mixtral.max_experts(), 8);
  EXPECT_EQ(deepseek.max_experts(), 64);
}

TEST(MemoryModel, MixtureActivationsAreWhatAForwardKeeps) {
  // Dropless at ep 1, the routed rows are exactly tokens x top_k whatever
  // the routing.
  for (int every : {1, 2})
    for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      SCOPED_TRACE(std::string(nn::recompute_name(mode)) + " every " + std::to_string(every));
      const models::LlamaConfig c = tiny_moe(every);
      const std::int64_t b = 2, t = 16;
      const std::int64_t got = measured_forward_bytes<models::Llama>(c, b, t, DType::kF32, mode);
      EXPECT_EQ(double(got), spec_forward_bytes(c.spec(t), double(b * t), mode));
    }
}

/// One block of `dense` replicated parameter elements and 4 routed experts of
/// `per_expert` elements each, top-2, all-to-alls of 2 x `width` elements a token.
nn::ModelSpec one_mixture(std::int64_t dense, std::int64_t per_expert, std::int64_t width = 8) {
  nn::ModelSpec s;
  s.description = "one mixture";
  s.seq_len = 4;
  s.width = width;
  nn::LayerSpec b;
  b.name = "moe";
  b.params_replicated = dense;
  b.experts = 4;
  b.top_k = 2;
  b.params_expert = 4 * per_expert;
  b.ep_all_to_all = 2.0 * double(width);
  b.ep_all_to_alls = 2;
  b.ep_buffers = {.replicated = 3.0 * 2.0 * double(width)};
  s.layers.push_back(b);
  return s;
}

TEST(MemoryModel, ExpertStateDividedByEpAndShardedOverDpOverEp) {
  // 1000 dense elements, 4 experts of 1000, f32, dp 4: a rank holds 1000 +
  // 4000 / ep elements; ZeRO shards the dense ones over 4 ranks and the
  // experts over the dp / ep ranks holding the same ones (expert_shards).
  const nn::ModelSpec s = one_mixture(1000, 1000);
  const auto state = [&](int ep, int zero) {
    const plan::LayoutChoice l{{.tp = 1, .pp = 1, .dp = 4, .ep = ep, .zero = zero, .micro_batch = 1}};
    return plan::estimate_memory(s, l).at(0);
  };
  struct Want {
    int ep, zero;
    double params, grads, optim;
  };
  for (const Want& w : std::vector<Want>{
           // ZeRO 0: 4 bytes of parameter and of gradient, 8 of AdamW's moments, each whole.
           {1, 0, 4 * 5000.0, 4 * 5000.0, 8 * 5000.0},
           {2, 0, 4 * 3000.0, 4 * 3000.0, 8 * 3000.0},
           {4, 0, 4 * 2000.0, 4 * 2000.0, 8 * 2000.0},
           // ZeRO 1: the moments sharded: 8 x (1000 / 4 + (4000 / ep) / (4 / ep)), the same at every ep.
           {1, 1, 4 * 5000.0, 4 * 5000.0, 8 * (250.0 + 1000.0)},
           {2, 1, 4 * 3000.0, 4 * 3000.0, 8 * (250.0 + 1000.0)},
           {4, 1, 4 * 2000.0, 4 * 2000.0, 8 * (250.0 + 1000.0)},
           // ZeRO 2: the gradient shards (4 x 1250) and backward's full buckets (4 x the rank's elements).
           {1, 2, 4 * 5000.0, 4 * 1250.0 + 4 * 5000.0, 8 * 1250.0},
           {2, 2, 4 * 3000.0, 4 * 1250.0 + 4 * 3000.0, 8 * 1250.0},
           {4, 2, 4 * 2000.0, 4 * 1250.0 + 4 * 2000.0, 8 * 1250.0},
           // ZeRO 3: the parameter shards and the one unit gathered whole.
           {1, 3, 4 * 1250.0 + 4 * 5000.0, 4 * 1250.0 + 4 * 5000.0, 8 * 1250.0},
           {2, 3, 4 * 1250.0 + 4 * 3000.0, 4 * 1250.0 + 4 * 3000.0, 8 * 1250.0},
           {4, 3, 4 * 1250.0 + 4 * 2000.0, 4 * 1250.0 + 4 * 2000.0, 8 * 1250.0},
       }) {
    SCOPED_TRACE(fmt::format("ep {} zero {}", w.ep, w.zero));
    const plan::StageMemory m = state(w.ep, w.zero);
    EXPECT_DOUBLE_EQ(m.of(MemCategory::kParameters), w.params);
    EXPECT_DOUBLE_EQ(m.of(MemCategory::kGradients), w.grads);
    EXPECT_DOUBLE_EQ(m.of(MemCategory::kOptimizerState), w.optim);
    // One all-to-all's buffers under ep > 1: 4 tokens x 3 x top_k x width x 4 bytes.
    EXPECT_DOUBLE_EQ(m.of(MemCategory::kCommunication), w.ep > 1 ? 4 * 3 * 2 * 8 * 4.0 : 0.0);
  }
  EXPECT_EQ(plan::expert_shards({.dp = 8, .ep = 2, .zero = 1}), 4);
  EXPECT_EQ(plan::expert_shards({.dp = 8, .ep = 2, .zero = 0}), 1);
  EXPECT_EQ(plan::expert_shards({.dp = 8, .ep = 1, .zero = 3, .shard_group = 4}), 4);
}

TEST(TimeModel, AllToAllPerMixtureLayerOnTheEpGroupsLink) {
  const plan::Link link{.latency_us = 10, .gbps = 1};
  EXPECT_DOUBLE_EQ(plan::all_to_all_ms(1e9, 1, link), 0.0);
  // (g - 1) / g x bytes / bandwidth + (g - 1) latency.
  EXPECT_NEAR(plan::all_to_all_ms(1e9, 4, link), 0.75e3 + 3 * 0.01, 1e-9);
  // Forward dispatches and combines, backward the same: 4 all-to-alls of
  // tokens x top_k x width elements a micro-batch, on the link tp x ep ranks span.
  const nn::ModelSpec s = one_mixture(1000, 1000, 1024);
  const plan::MachineProfile p = cluster(80, 8);
  const double tokens = 2 * 4, bytes = tokens * 2 * 1024 * 4.0;
  for (int ep : {1, 2, 4}) {
    for (int tp : {1, 4}) {
      SCOPED_TRACE(fmt::format("ep {} tp {}", ep, tp));
      plan::LayoutChoice l{{.tp = tp, .pp = 1, .dp = 4, .ep = ep, .micro_batch = 2}};
      const plan::Link& on = tp * ep <= 8 ? p.intra_node : p.inter_node;
      const plan::TimeEstimate t = plan::estimate_time(s, l, p);
      EXPECT_NEAR(t.stages[0].ep_comm_ms, 4 * plan::all_to_all_ms(bytes, ep, on), 1e-12);
      // Full recomputation runs forward's two again.
      l.recompute = Recompute::kFull;
      EXPECT_NEAR(plan::estimate_time(s, l, p).stages[0].ep_comm_ms, 6 * plan::all_to_all_ms(bytes, ep, on), 1e-12);
    }
  }
  EXPECT_EQ(plan::estimate_time(s, {{.tp = 1, .pp = 1, .dp = 4, .ep = 1, .micro_batch = 2}}, p).stages[0].ep_comm_ms, 0);
}

TEST(TimeModel, MixtureFlopsAreNotDividedOverTp) {
  // The routed experts run whole on every tp rank: a model of mixtures
  // gains less from tp than the same model dense.
  models::LlamaConfig moe = tiny_moe();
  moe.n_embd = 256, moe.n_head = 8, moe.n_kv_head = 8, moe.ffn_hidden = 512, moe.context = 256;
  moe.moe_aux_loss_coeff = 0;
  models::LlamaConfig dense = moe;
  dense.experts = 0;
  dense.ffn_hidden = 2 * 512;  // top_k experts' worth of FLOPs
  const plan::MachineProfile p = cluster(80, 8);
  const auto fwd = [&](const models::LlamaConfig& c, int tp) {
    const plan::LayoutChoice l{{.tp = tp, .pp = 1, .dp = 1, .micro_batch = 4}};
    return plan::estimate_time(c.spec(256), l, p).stages[0].forward_ms;
  };
  EXPECT_LT(fwd(dense, 4) / fwd(dense, 1), fwd(moe, 4) / fwd(moe, 1));
}

TEST(Search, EnumeratesEpDividingDpAndTheExperts) {
  plan::PlanRequest rq;
  rq.profile = cluster(80, 8);
  rq.world = 8;
  rq.global_batch = 16;
  rq.model = tiny_moe().spec(16);
  rq.tp = {1};
  rq.pp = {1};
  const plan::PlanResult r = plan::search_plans(rq, 1000);
  std::set<int> eps;
  for (const plan::Plan& p : r.plans) {
    EXPECT_EQ(p.layout.dp % p.layout.ep, 0) << p.layout.str();
    eps.insert(p.layout.ep);
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));  // 4 experts: never 8
  rq.ep = {2};
  for (const plan::Plan& p : plan::search_plans(rq, 1000).plans) EXPECT_EQ(p.layout.ep, 2);
  rq.ep = {};
  rq.model = tiny_llama().spec(16);
  for (const plan::Plan& p : plan::search_plans(rq, 1000).plans) EXPECT_EQ(p.layout.ep, 1);
}

}  // namespace
}  // namespace ht
