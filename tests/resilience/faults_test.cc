// HT_FAULTS plans: parsing, which faults match a rank and step, bad entries
// refused clearly, and fired faults not repeated after a relaunch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <filesystem>

#include "ht/resilience/faults.h"
#include "test_util.h"

namespace ht::resilience {
namespace {

TEST(FaultPlan, ParsesEveryKindAndMatchesRankAndStep) {
  const FaultPlan p = FaultPlan::parse(
      "crash:rank=2:step=37,hang:rank=1:step=80,nan:step=50,slow:rank=3:factor=3,bitflip:rank=1:step=60,"
      "ckpt-corrupt:step=100,node-unhealthy:node=2");
  ASSERT_EQ(p.faults().size(), 7u);
  EXPECT_TRUE(p.find(FaultKind::kCrash, 2, 37));
  EXPECT_FALSE(p.find(FaultKind::kCrash, 2, 36));
  EXPECT_FALSE(p.find(FaultKind::kCrash, 1, 37)) << "another rank";
  EXPECT_TRUE(p.find(FaultKind::kNan, 5, 50)) << "no rank: every rank";
  EXPECT_TRUE(p.find(FaultKind::kNan, 0, 53)) << "nan persists after its step";
  EXPECT_FALSE(p.find(FaultKind::kNan, 0, 49));
  EXPECT_FALSE(p.find(FaultKind::kHang, 1, 81)) << "a hang does not persist (it never returns)";
  const auto slow = p.find(FaultKind::kSlow, 3, 7);
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->factor, 3.0);
  EXPECT_TRUE(p.node_unhealthy(2));
  EXPECT_FALSE(p.node_unhealthy(1));
  const std::string file = testing::TempDir() + "/faults_test_unhealthy";
  std::ofstream(file) << "x";
  const FaultPlan repairable = FaultPlan::parse("node-unhealthy:node=1:while=" + file);
  EXPECT_TRUE(repairable.node_unhealthy(1));
  std::filesystem::remove(file);
  EXPECT_FALSE(repairable.node_unhealthy(1)) << "the file gone: repaired";
  EXPECT_TRUE(FaultPlan::parse("").empty());
  const FaultPlan k = FaultPlan::parse("snapshot-crash:rank=1:step=6:phase=replica-commit");
  ASSERT_EQ(k.faults().size(), 1u);
  EXPECT_EQ(k.faults().front().kind, FaultKind::kSnapshotCrash);
  EXPECT_EQ(k.faults().front().phase, "replica-commit");
  EXPECT_EQ(k.faults().front().step, 6);
}

TEST(FaultPlan, BadEntriesFailClearly) {
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("explode:rank=1"); }, ErrorKind::kConfig,
                                 {"unknown fault 'explode'", "crash:rank=R:step=S"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("crash:rank"); }, ErrorKind::kConfig, {"'rank' is not key=value"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("crash:rank=x"); }, ErrorKind::kConfig, {"'x' is not a number"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("crash:when=3"); }, ErrorKind::kConfig, {"unknown key 'when'"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("node-unhealthy"); }, ErrorKind::kConfig, {"needs node=N"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("crash:rank=1:step=3:while=/x"); }, ErrorKind::kConfig,
                                 {"only node-unhealthy takes while"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("snapshot-crash:rank=1:step=6"); }, ErrorKind::kConfig,
                                 {"snapshot-crash needs phase=copy, write, commit, replicate or replica-commit"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("snapshot-crash:step=6:phase=later"); }, ErrorKind::kConfig,
                                 {"snapshot-crash needs phase="}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("crash:step=6:phase=write"); }, ErrorKind::kConfig,
                                 {"only snapshot-crash takes a phase"}));
  EXPECT_TRUE(test::throws_error([] { FaultPlan::parse("slow:rank=1:factor=0.5"); }, ErrorKind::kConfig,
                                 {"factor >= 1"}));
}

TEST(FaultPlan, FiredFaultsAreNotRepeated) {
  const test::TempDir tmp("ht_faults_test");
  const std::string dir = tmp.path().string();
  FaultPlan p = FaultPlan::parse("crash:rank=1:step=5,hang:rank=0:step=9");
  record_fired(dir, p.faults().front());
  p.drop_fired(dir);
  ASSERT_EQ(p.faults().size(), 1u);
  EXPECT_EQ(p.faults().front().kind, FaultKind::kHang);
}

}  // namespace
}  // namespace ht::resilience
