// Llama checkpoints: 2N steps straight equal N steps, a save, a fresh engine
// that resumes (weights, optimizer, data position), and N more steps — bit
// for bit (losses and final weights) — for one process, tp2 (the key/value
// heads and the packed gate_up cut over the ranks), pp2 in bf16, and ZeRO-3
// over dp2 x tp2 (shards of tp parts). checkpoint_resume_test.cc does the
// same for GPT.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ht/comm/mpi_communicator.h"
#include "llama_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

namespace fs = std::filesystem;

test::LlamaRunOptions small() {
  test::LlamaRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 3, .n_head = 4, .n_kv_head = 2, .n_embd = 32,
             .ffn_hidden = 48};
  o.seq_len = 8;
  o.engine.micro_batch = 2;
  o.engine.grad_accum = 2;
  o.engine.steps = 8;
  o.engine.warmup_steps = 2;
  o.engine.lr = 3e-3f;
  o.engine.eval_batches = 2;
  return o;
}

// A directory shared by all ranks (rank 0 empties it, everyone uses it).
std::string shared_dir(comm::Communicator& world, const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("ht_llama_ckpt_test_" + name)).string();
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier()->wait();
  return dir;
}

struct Layout {
  int tp = 1, pp = 1, zero = 0;
  std::string precision = "fp32";
};

void bit_exact_resume(const Layout& l, const std::string& name) {
  const test::LlamaRunOptions base = small();
  const data::TokenSplits data = test::pangram_text(base.model.vocab_size);
  comm::DeviceMesh mesh(comm::make_mpi_world(), l.tp, l.pp);
  test::LlamaRunOptions o = base;
  o.engine.data_parallel.zero_stage = l.zero;
  o.engine.data_parallel.precision = precision::parse_policy(l.precision);
  const int n = 4;

  std::vector<float> straight;
  std::map<std::string, Tensor> straight_weights;
  {
    test::LlamaEngine e(o, data, &mesh);
    for (int i = 0; i < 2 * n; ++i) straight.push_back(e.engine.step().loss);
    straight_weights = e.engine.full_parameters();
  }
  o.engine.ckpt_dir = shared_dir(mesh.world(), name);
  std::vector<float> resumed;
  {
    test::LlamaEngine e(o, data, &mesh);
    for (int i = 0; i < n; ++i) resumed.push_back(e.engine.step().loss);
    EXPECT_EQ(e.engine.save_checkpoint(), "");
    EXPECT_EQ(e.engine.wait_for_checkpoint(), "");
  }
  o.engine.resume = true;
  test::LlamaEngine e(o, data, &mesh);
  EXPECT_EQ(e.engine.resumed_from(), n);
  for (int i = 0; i < n; ++i) resumed.push_back(e.engine.step().loss);
  const auto weights = e.engine.full_parameters();
  EXPECT_EQ(resumed, straight) << "losses of the resumed run";
  EXPECT_LT(straight.back(), straight.front()) << "the run should learn";
  ASSERT_EQ(weights.size(), straight_weights.size());
  for (const auto& [key, want] : straight_weights) {
    ASSERT_TRUE(weights.count(key)) << key << " missing after the resume";
    EXPECT_EQ(weights.at(key).to_vector<float>(), want.to_vector<float>()) << "final weights of " << key;
  }
}

TEST(LlamaCheckpoint, OneProcessResumesBitExact) {
  if (test::world_size() != 1) GTEST_SKIP() << "runs with 1 process";
  bit_exact_resume({}, "one");
}

TEST(LlamaCheckpoint, Tp2ResumesBitExact) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  bit_exact_resume({.tp = 2}, "tp2");
}

TEST(LlamaCheckpoint, Pp2Bf16ResumesBitExact) {
  if (test::world_size() != 2) GTEST_SKIP() << "runs with 2 processes";
  bit_exact_resume({.pp = 2, .precision = "bf16"}, "pp2_bf16");
}

TEST(LlamaCheckpoint, Zero3Dp2Tp2ResumesBitExact) {
  if (test::world_size() != 4) GTEST_SKIP() << "runs with 4 processes";
  bit_exact_resume({.tp = 2, .zero = 3}, "zero3_dp2_tp2");
}

}  // namespace
}  // namespace ht::train
