// Memory tiers of checkpoints: a run resumed from its ranks' snapshots in
// node memory continues bit for bit as if never stopped; ranks whose node
// lost its memory pull their copy from the peer that holds their replica; a
// damaged snapshot or one of another layout falls back to disk; a finished
// run leaves no snapshot behind. Nodes are simulated (HT_SIMULATED_NODES):
// 4 ranks as two nodes of two (dp2 x tp2, ZeRO-1), 2 ranks as two nodes of
// one (ZeRO-3), 1 rank on one node (no replica).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ht/comm/mpi_communicator.h"
#include "lm_engine.h"
#include "mpi_test_util.h"
#include "test_util.h"

namespace ht::train {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 3;  // steps before the stop, and after the resume

/// The layout tried on a world of each size, and its simulated nodes.
struct Case {
  parallel::Layout layout;
  const char* nodes = "1:0";  // HT_SIMULATED_NODES
};

Case setup_for(int world) {
  if (world == 4) return {.layout = {.tp = 2, .zero = 1}, .nodes = "2:0,1"};
  if (world == 2) return {.layout = {.zero = 3}, .nodes = "1:0,1"};
  return {};
}

test::GPTRunOptions options(const Case& s) {
  test::GPTRunOptions o;
  o.model = {.vocab_size = 64, .context = 16, .n_layer = 2, .n_head = 4, .n_embd = 32};
  o.seq_len = 8;
  o.engine.layout = s.layout;
  o.engine.layout.micro_batch = 2;
  o.engine.layout.grad_accum = 2;
  o.engine.steps = 2 * kSteps;
  o.engine.warmup_steps = 2;
  o.engine.lr = 3e-3f;
  o.engine.eval_samples = 0;
  return o;
}

class MemoryTier : public ::testing::Test {
 protected:
  void SetUp() override {
    world_size_ = test::world_size();
    setup_ = setup_for(world_size_);
    ::setenv("HT_SIMULATED_NODES", setup_.nodes, 1);
    mesh_ = std::make_unique<comm::DeviceMesh>(comm::make_mpi_world(), setup_.layout.tp, setup_.layout.pp);
    // The reference: 2 x kSteps steps without a stop.
    test::GPTEngine t(options(setup_), data_, mesh_.get());
    for (int i = 0; i < 2 * kSteps; ++i) straight_.push_back(t.engine.step().loss);
    straight_weights_ = t.engine.full_parameters();
  }
  void TearDown() override { ::unsetenv("HT_SIMULATED_NODES"); }

  // kSteps steps with a snapshot after each and a disk checkpoint after the
  // first, then a stop (the engine is destroyed, the snapshots stay).
  test::GPTRunOptions train_and_stop(const test::SharedTempDir& dir) {
    test::GPTRunOptions o = options(setup_);
    o.engine.ckpt_dir = dir.path() + "/ckpt";
    o.engine.mem_ckpt_dir = dir.path() + "/mem";
    o.engine.mem_ckpt_every = 1;
    test::GPTEngine t(o, data_, mesh_.get());
    for (int i = 1; i <= kSteps; ++i) {
      const StepStats s = t.engine.step();
      EXPECT_EQ(s.loss, straight_[std::size_t(i - 1)]) << "step " << i;
      EXPECT_TRUE(s.snapshotted || i > 1) << "a snapshot is due every step unless the last is still in flight";
      if (i == 1) EXPECT_EQ(t.engine.checkpoint_now(), "");
      // Each step's snapshot completes before the next, so every step has one.
      EXPECT_EQ(t.engine.checkpointer()->wait_snapshot(), "");
    }
    o.engine.resume = true;
    mesh_->world().barrier()->wait();  // every rank's snapshots are written
    return o;
  }

  // Resumes and checks where from, then trains to the end: every loss and
  // every final weight equal to the reference's.
  // `after_first_step` runs once the first step's snapshot is written.
  void resume_and_compare(const test::GPTRunOptions& o, std::int64_t step, const std::string& tier, int pulled,
                          const std::function<void()>& after_first_step = {}) {
    test::GPTEngine t(o, data_, mesh_.get());
    ASSERT_EQ(t.engine.resumed_from(), step);
    EXPECT_EQ(t.engine.checkpointer()->last_load().tier, tier);
    EXPECT_EQ(t.engine.checkpointer()->last_load().pulled, pulled);
    std::vector<float> resumed;
    for (std::int64_t i = step; i < 2 * kSteps; ++i) {
      resumed.push_back(t.engine.step().loss);
      if (i == step && after_first_step) {
        EXPECT_EQ(t.engine.checkpointer()->wait_snapshot(), "");
        mesh_->world().barrier()->wait();
        after_first_step();
      }
    }
    EXPECT_EQ(resumed, std::vector<float>(straight_.begin() + step, straight_.end()));
    const std::map<std::string, Tensor> weights = t.engine.full_parameters();
    for (const auto& [name, want] : straight_weights_)
      EXPECT_EQ(weights.at(name).to_vector<float>(), want.to_vector<float>()) << "final weights of " << name;
    t.engine.checkpointer()->discard_memory(true);
  }

  std::string own_file(const std::string& mem, int rank, std::int64_t step) const {
    const std::string node = "node" + std::to_string(world_size_ == 4 ? rank / 2 : rank);
    return fmt::format("{}/{}/rank_{:05d}/step_{:08d}/rank_{:05d}.snap", mem, node, rank, step, rank);
  }

  int world_size_ = 1;
  Case setup_;
  std::unique_ptr<comm::DeviceMesh> mesh_;
  const data::TokenSplits data_ = test::pangram_text(64);
  std::vector<float> straight_;
  std::map<std::string, Tensor> straight_weights_;
};

TEST_F(MemoryTier, ResumesFromNodeMemoryBitExact) {
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_own");
  const test::GPTRunOptions o = train_and_stop(dir);
  resume_and_compare(o, kSteps, "memory", 0);
  // The finished run's snapshots are gone.
  mesh_->world().barrier()->wait();
  EXPECT_FALSE(fs::exists(dir.path() + "/mem")) << "discard_memory left the tier's directory";
}

TEST_F(MemoryTier, ALostNodesRanksPullTheirCopyFromThePeer) {
  if (world_size_ == 1) GTEST_SKIP() << "one node: no peer holds a replica";
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_peer");
  const test::GPTRunOptions o = train_and_stop(dir);
  // Node 1 is replaced: its memory is gone.
  if (mesh_->world().rank() == 0) fs::remove_all(dir.path() + "/mem/node1");
  mesh_->world().barrier()->wait();
  resume_and_compare(o, kSteps, "memory+peer", world_size_ / 2);
}

// The first node is lost and a spare comes last: every rank moves, so each
// finds its state under another rank's directory. The ranks now on node 1
// read the replicas node 1 holds in place; those on the spare (node 2) get
// their copies from node 1's ranks, which held them as their own.
TEST_F(MemoryTier, TheFirstNodeLostEveryRankFindsItsCopyWhereverItIs) {
  if (world_size_ == 1) GTEST_SKIP() << "one node: no peer holds a replica";
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_moved");
  const test::GPTRunOptions o = train_and_stop(dir);
  if (mesh_->world().rank() == 0) fs::remove_all(dir.path() + "/mem/node0");
  mesh_->world().barrier()->wait();
  ::setenv("HT_SIMULATED_NODES", world_size_ == 4 ? "2:1,2" : "1:1,2", 1);
  const std::string node1 = dir.path() + "/mem/node1";
  resume_and_compare(o, kSteps, "memory+peer", world_size_ / 2, [&] {
    // Node 1 keeps only what its ranks write now: their own snapshots and
    // the replicas of their sources (node 2's ranks).
    std::set<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(node1)) names.insert(e.path().filename().string());
    const std::set<std::string> want =
        world_size_ == 4 ? std::set<std::string>{"rank_00000", "rank_00001", "replica_of_rank_00002", "replica_of_rank_00003"}
                         : std::set<std::string>{"rank_00000", "replica_of_rank_00001"};
    EXPECT_EQ(names, want);
  });
}

TEST_F(MemoryTier, ADamagedSnapshotFallsBackToDisk) {
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_damaged");
  const test::GPTRunOptions o = train_and_stop(dir);
  if (mesh_->world().rank() == 0) {
    // One byte of rank 0's newest snapshot flipped, three quarters in (the tensors' data).
    const std::string path = own_file(dir.path() + "/mem", 0, kSteps);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    const auto at = std::streamoff(fs::file_size(path) * 3 / 4);
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte = char(byte ^ 0x10);
    f.seekp(at);
    f.write(&byte, 1);
  }
  mesh_->world().barrier()->wait();
  resume_and_compare(o, 1, "disk", 0);
}

// The holder of a lost node's copy cannot send it (the replica's file is
// gone, its directory left, so the plan still counts on it): the rank that
// needed it cannot load, every rank agrees, and the run resumes from disk.
TEST_F(MemoryTier, AHolderThatCannotSendFallsBackToDisk) {
  if (world_size_ == 1) GTEST_SKIP() << "one node: no peer holds a replica";
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_unsent");
  const test::GPTRunOptions o = train_and_stop(dir);
  if (mesh_->world().rank() == 0) {
    fs::remove_all(dir.path() + "/mem/node1");
    const int lost = world_size_ / 2;  // node 1's first rank, whose replica node 0 holds
    const std::string replica = fmt::format("{}/mem/node0/replica_of_rank_{:05d}/step_{:08d}/rank_{:05d}.snap",
                                            dir.path(), lost, kSteps, lost);
    EXPECT_TRUE(fs::remove(replica)) << replica;
  }
  mesh_->world().barrier()->wait();
  resume_and_compare(o, 1, "disk", 0);
}

TEST_F(MemoryTier, AnUnwritableTierIsReportedAndTrainingGoesOn) {
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_unwritable");
  if (mesh_->world().rank() == 0) {
    fs::create_directories(dir.path());
    std::ofstream(dir.path() + "/file") << "not a directory";
  }
  mesh_->world().barrier()->wait();
  test::GPTRunOptions o = options(setup_);
  o.engine.ckpt_dir = dir.path() + "/ckpt";
  o.engine.mem_ckpt_dir = dir.path() + "/file/mem";
  o.engine.mem_ckpt_every = 1;
  test::GPTEngine t(o, data_, mesh_.get());
  EXPECT_EQ(t.engine.step().loss, straight_[0]);
  const std::string error = t.engine.checkpointer()->wait_snapshot();
  EXPECT_NE(error.find("memory snapshot of step 1 not written"), std::string::npos) << error;
  EXPECT_NE(error.find("is the memory tier's directory writable?"), std::string::npos) << error;
  // The next steps train as before, and report the failure again.
  EXPECT_EQ(t.engine.step().loss, straight_[1]);
  EXPECT_NE(t.engine.checkpointer()->wait_snapshot(), "");
}

// Auto, the command line's default, in a real engine: the first snapshot
// after 10 quiet steps (the steps auto measures against), the next within
// 10 steps of it (an image mapped afresh is measured again soon), so the
// engine's step times and busy votes reach the cadence and let it go on.
TEST_F(MemoryTier, AutoSnapshotsFromStepTenOn) {
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_auto");
  test::GPTRunOptions o = options(setup_);
  o.engine.ckpt_dir = dir.path() + "/ckpt";
  o.engine.mem_ckpt_dir = dir.path() + "/mem";
  o.engine.mem_ckpt_every = -1;
  test::GPTEngine t(o, data_, mesh_.get());
  std::vector<std::int64_t> taken;
  for (int i = 1; i <= 20; ++i) {
    const StepStats s = t.engine.step();
    if (!s.snapshotted) continue;
    taken.push_back(s.step);
    // Written before the next step: a snapshot in flight would delay the next.
    EXPECT_EQ(t.engine.checkpointer()->wait_snapshot(), "");
  }
  // Every rank's replicas written before rank 0 removes the directory.
  mesh_->world().barrier()->wait();
  ASSERT_GE(taken.size(), 2u) << "auto took " << taken.size() << " snapshot(s) in 20 steps";
  EXPECT_EQ(taken[0], 10);
  EXPECT_GE(taken[1], 13) << "steps 10 and 11 touched by the first, then a quiet one";
  EXPECT_LE(taken[1], 20);
}

TEST_F(MemoryTier, AnotherLayoutResumesFromDisk) {
  if (world_size_ != 4) GTEST_SKIP() << "runs with 4 processes";
  const test::SharedTempDir dir(mesh_->world(), "ht_mem_tier_layout");
  test::GPTRunOptions o = train_and_stop(dir);
  // Snapshots of dp2 x tp2; the run comes back as dp4.
  comm::DeviceMesh dp4(comm::make_mpi_world(), 1, 1);
  o.engine.layout.tp = 1;
  test::GPTEngine t(o, data_, &dp4);
  EXPECT_EQ(t.engine.resumed_from(), 1);
  EXPECT_EQ(t.engine.checkpointer()->last_load().tier, "disk");
  t.engine.checkpointer()->discard_memory(true);
}

}  // namespace
}  // namespace ht::train
