// Checkpoints: 2N steps straight equal N steps, a save, a fresh engine that
// resumes (weights, optimizer, data position), and N more steps — bit for bit
// (losses and final weights) — for the GPT in one process, ZeRO-2 over dp2,
// and dp2 x tp2 x pp2 in f16, and for the Llama in one process, tp2 (the
// key/value heads and the packed gate_up cut over the ranks), pp2 in bf16 and
// ZeRO-3 over dp2 x tp2; and a shard missing from the manifest is named and
// not resumed from.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ht/comm/mpi_communicator.h"
#include "lm_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

namespace fs = std::filesystem;

test::GPTRunOptions small() {
  test::GPTRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 4, .n_head = 4, .n_embd = 32};
  o.seq_len = 8;
  o.engine.layout.micro_batch = 2;
  o.engine.layout.grad_accum = 2;
  o.engine.steps = 8;
  o.engine.warmup_steps = 2;
  o.engine.lr = 3e-3f;
  o.engine.eval_samples = 16;
  return o;
}

test::LlamaRunOptions small_llama() {
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
             .ffn_hidden = 48};
  o.seq_len = 8;
  o.engine = small().engine;
  return o;
}

/// The mesh, the ZeRO stage and the precision a resume is tried in.
struct Setup {
  int tp = 1, pp = 1, zero = 0;
  std::string precision = "fp32";
};

template <typename Engine, typename Options>
void bit_exact_resume(const Setup& l, Options o, const std::string& name) {
  const data::TokenSplits data = test::pangram_text(64);
  comm::DeviceMesh mesh(comm::make_mpi_world(), l.tp, l.pp);
  o.engine.layout.tp = l.tp;
  o.engine.layout.pp = l.pp;
  o.engine.layout.zero = l.zero;
  o.engine.precision = precision::parse_policy(l.precision);
  const int n = 4;

  std::vector<float> straight;
  std::map<std::string, Tensor> straight_weights;
  {
    Engine t(o, data, &mesh);
    for (int i = 0; i < 2 * n; ++i) straight.push_back(t.engine.step().loss);
    straight_weights = t.engine.full_parameters();
  }
  const test::SharedTempDir ckpt(mesh.world(), "ht_ckpt_test_" + name);
  o.engine.ckpt_dir = ckpt.path();
  std::vector<float> resumed;
  {
    Engine t(o, data, &mesh);
    for (int i = 0; i < n; ++i) resumed.push_back(t.engine.step().loss);
    EXPECT_EQ(t.engine.save_checkpoint(), "");
    EXPECT_EQ(t.engine.wait_for_checkpoint(), "");
  }
  o.engine.resume = true;
  Engine t(o, data, &mesh);
  EXPECT_EQ(t.engine.resumed_from(), n);
  for (int i = 0; i < n; ++i) resumed.push_back(t.engine.step().loss);
  const std::map<std::string, Tensor> weights = t.engine.full_parameters();
  EXPECT_EQ(resumed, straight) << "losses of the resumed run";
  EXPECT_LT(straight.back(), straight.front()) << "the run should learn";
  ASSERT_EQ(weights.size(), straight_weights.size());
  for (const auto& entry : straight_weights) {
    const std::string& key = entry.first;
    const Tensor& want = entry.second;
    ASSERT_TRUE(weights.count(key)) << key << " missing after the resume";
    EXPECT_EQ(weights.at(key).to_vector<float>(), want.to_vector<float>()) << "final weights of " << key;
  }
}

void bit_exact_resume(const Setup& l, const std::string& name) {
  bit_exact_resume<test::GPTEngine>(l, small(), name);
}

void llama_bit_exact_resume(const Setup& l, const std::string& name) {
  bit_exact_resume<test::LlamaEngine>(l, small_llama(), "llama_" + name);
}

TEST(Checkpoint, OneProcessResumesBitExact) {
  if (test::world_size() != 1) GTEST_SKIP() << "runs with 1 process";
  bit_exact_resume({}, "one");
}

TEST(Checkpoint, Zero2Dp2ResumesBitExact) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  bit_exact_resume({.zero = 2}, "zero2");
}

// A rank reads only the pieces that overlap its own range when the layout
// matches; a piece missing from the manifest is then found by the rank that
// needs it, which names the shard, and no rank resumes from that checkpoint.
TEST(Checkpoint, AMissingShardIsNamedAndNotResumedFrom) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  const data::TokenSplits data = test::pangram_text(64);
  comm::DeviceMesh mesh(comm::make_mpi_world(), 1, 1);
  test::GPTRunOptions o = small();
  o.engine.layout.zero = 2;
  const test::SharedTempDir ckpt(mesh.world(), "ht_ckpt_test_missing_shard");
  o.engine.ckpt_dir = ckpt.path();
  {
    test::GPTEngine t(o, data, &mesh);
    t.engine.step();
    EXPECT_EQ(t.engine.save_checkpoint(), "");
    EXPECT_EQ(t.engine.wait_for_checkpoint(), "");
  }
  std::string dropped;
  if (mesh.world().rank() == 0) {
    const fs::path manifest = fs::path(o.engine.ckpt_dir) / "step_00000001" / "manifest.json";
    nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
    // The layout it was saved under, by the name the layout gives itself.
    EXPECT_EQ(m.at("run").at("layout"), "zero2_dp2_tp1_pp1_1f1b_mb2_acc2");
    auto& pieces = m.at("pieces");
    // A tensor cut between the two shards: drop its second piece, leaving a gap.
    const auto it = std::find_if(pieces.begin(), pieces.end(),
                                 [](const auto& p) { return p.at("kind") == "master" && p.at("begin") > 0; });
    ASSERT_NE(it, pieces.end()) << "no tensor is cut between the shards";
    dropped = it->at("tensor").get<std::string>();
    pieces.erase(it);
    std::ofstream(manifest) << m.dump(1);
  }
  mesh.world().barrier()->wait();
  o.engine.resume = true;
  ::testing::internal::CaptureStderr();
  test::GPTEngine t(o, data, &mesh);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(t.engine.resumed_from(), 0) << "resumed from a checkpoint that lacks a piece";
  // The rank whose range held the dropped piece names it.
  Tensor named = Tensor::from_vector(
      std::vector<std::int32_t>{err.find("lacks a shard of ") != std::string::npos ? 1 : 0}, {1});
  mesh.world().all_reduce(named, named, comm::ReduceOp::kMax)->wait();
  EXPECT_EQ(named.to_vector<std::int32_t>()[0], 1) << "no rank named the missing shard; rank " << mesh.world().rank()
                                                   << " said: " << err;
  if (mesh.world().rank() == 0) EXPECT_NE(err.find("starting from scratch"), std::string::npos) << err;
}

TEST(Checkpoint, Dp2Tp2Pp2F16ResumesBitExact) {
  if (test::world_size() != 8) GTEST_SKIP() << "runs with 8 processes";
  bit_exact_resume({.tp = 2, .pp = 2, .zero = 1, .precision = "fp16"}, "3d_f16");
}

TEST(LlamaCheckpoint, OneProcessResumesBitExact) {
  if (test::world_size() != 1) GTEST_SKIP() << "runs with 1 process";
  llama_bit_exact_resume({}, "one");
}

TEST(LlamaCheckpoint, Tp2ResumesBitExact) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  llama_bit_exact_resume({.tp = 2}, "tp2");
}

TEST(LlamaCheckpoint, Pp2Bf16ResumesBitExact) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  llama_bit_exact_resume({.pp = 2, .precision = "bf16"}, "pp2_bf16");
}

TEST(LlamaCheckpoint, Zero3Dp2Tp2ResumesBitExact) {
  if (test::world_size() != 4) GTEST_SKIP() << "runs with 4 processes";
  llama_bit_exact_resume({.tp = 2, .zero = 3}, "zero3_dp2_tp2");
}

}  // namespace
}  // namespace ht::train
