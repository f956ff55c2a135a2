// The engine's run policies on their own (src/train/policies.h): what each
// decides from what it is told, without an engine. (Stragglers need several
// ranks: the htrun straggler scenarios and engine_test cover them.)
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "train/policies.h"

namespace ht::train {
namespace {

TEST(DivergenceWatch, EndsTheRunAtTheLimitAndForgetsOnAFiniteLoss) {
  DivergenceWatch watch(3);
  watch.observe(NAN, 1);
  watch.observe(INFINITY, 2);
  EXPECT_TRUE(watch.suspect());
  EXPECT_EQ(watch.nonfinite_run(), 2);
  watch.observe(1.5f, 3);  // a finite loss: the run starts again
  EXPECT_FALSE(watch.suspect());
  watch.observe(NAN, 4);
  watch.observe(NAN, 5);
  EXPECT_TRUE(test::throws_error([&] { watch.observe(NAN, 6); }, ErrorKind::kDivergence,
                                 {"non-finite for 3 steps in a row (step 6)", "lower learning rate"}));
}

TEST(CheckpointCadence, EveryNStepsByTimeAndNeverOfASuspectState) {
  CheckpointCadence every3(3, 0);
  EXPECT_FALSE(every3.due_by_time());  // no time cadence
  EXPECT_FALSE(every3.save_now(1, false, false));
  EXPECT_FALSE(every3.save_now(2, false, false));
  EXPECT_FALSE(every3.save_now(3, false, true));  // due, but the loss is non-finite: it waits
  EXPECT_TRUE(every3.save_now(4, false, false));  // the next finite step saves it
  EXPECT_FALSE(every3.save_now(5, false, false));
  EXPECT_TRUE(every3.save_now(6, false, false));
  EXPECT_TRUE(every3.save_now(7, true, false));  // rank 0's clock voted
  CheckpointCadence by_time(0, 1e-9);  // any time at all is enough
  EXPECT_TRUE(by_time.due_by_time());
  CheckpointCadence hourly(0, 3600);
  hourly.saved();
  EXPECT_FALSE(hourly.due_by_time());
}

ckpt::SnapshotStats snapshot_of(std::int64_t step, double stall_ms, double cpu_ms, double replicate_ms, bool fresh) {
  ckpt::SnapshotStats s;
  s.step = step;
  s.stall_ms = stall_ms;
  s.cpu_ms = cpu_ms;
  s.replicate_ms = replicate_ms;
  s.fresh_image = fresh;
  return s;
}

TEST(SnapshotCadence, FixedEveryNSteps) {
  SnapshotCadence every4(4, true);
  const ckpt::SnapshotStats none;
  EXPECT_FALSE(every4.due(3, none, false));
  EXPECT_TRUE(every4.due(4, none, false));
  every4.taken(4);
  EXPECT_FALSE(every4.due(7, none, false));
  EXPECT_TRUE(every4.due(8, none, false));
}

// `auto` after its first snapshot, at step 1, with steps of 100 ms.
SnapshotCadence auto_after_step_1(bool cpu) {
  SnapshotCadence c(-1, cpu);
  EXPECT_TRUE(c.due(1, {}, false));  // nothing measured yet: every step
  c.taken(1);
  c.step_time(100);
  return c;
}

// Auto: the interval keeps the snapshots' cost within 2 % of a step on a
// GPU run, 1 % on a CPU run.
TEST(SnapshotCadence, AutoKeepsTheCostWithinItsShareOfAStep) {
  SnapshotCadence on_gpu = auto_after_step_1(false);  // 2 % of a step: 2 ms
  // The stall and the CPU time in the background: 10 + 30 = 40 ms -> 20
  // steps. The exchange's wall time (500 ms, mostly waiting) is not a cost.
  const ckpt::SnapshotStats last = snapshot_of(1, 10, 30, 500, false);
  EXPECT_FALSE(on_gpu.due(20, last, false));
  EXPECT_TRUE(on_gpu.due(21, last, false));
  // The cost is a mean over snapshots: one of 120 ms after one of 40 ms
  // counts as 80 ms -> 40 steps (the last alone would say 60).
  on_gpu.taken(21);
  EXPECT_FALSE(on_gpu.due(60, snapshot_of(21, 20, 100, 0, false), false));
  EXPECT_TRUE(on_gpu.due(61, snapshot_of(21, 20, 100, 0, false), false));
  // A CPU run: 1 % of a step, 1 ms -> 40 steps.
  SnapshotCadence on_cpu = auto_after_step_1(true);
  EXPECT_FALSE(on_cpu.due(40, last, false));
  EXPECT_TRUE(on_cpu.due(41, last, false));
  // A copy into fresh pages costs more than the next will: measure again within 10 steps.
  SnapshotCadence fresh = auto_after_step_1(true);
  EXPECT_FALSE(fresh.due(10, snapshot_of(1, 1000, 0, 0, true), false));
  EXPECT_TRUE(fresh.due(11, snapshot_of(1, 1000, 0, 0, true), false));
  // A snapshot still being written is not measured yet: the interval stays.
  SnapshotCadence busy = auto_after_step_1(true);
  EXPECT_TRUE(busy.due(2, snapshot_of(1, 1000, 0, 0, false), true));
}

TEST(ReplicaCheck, EveryNStepsAndBeforeASaveOfAnUncheckedStep) {
  ReplicaCheck off(0);
  EXPECT_FALSE(off.due(5));
  EXPECT_FALSE(off.before_save(5));
  ReplicaCheck every2(2);
  EXPECT_FALSE(every2.due(1));
  EXPECT_TRUE(every2.due(2));
  EXPECT_TRUE(every2.before_save(3));
}

}  // namespace
}  // namespace ht::train
