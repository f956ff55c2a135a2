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

TEST(SnapshotCadence, FixedEveryNSteps) {
  SnapshotCadence every4(4);
  EXPECT_FALSE(every4.due(3));
  EXPECT_TRUE(every4.due(4));
  every4.taken(4, 10, false);
  EXPECT_FALSE(every4.due(7));
  EXPECT_TRUE(every4.due(8));
  // A resumed run counts from the step it resumed from.
  every4.resumed(10);
  EXPECT_FALSE(every4.due(13));
  EXPECT_TRUE(every4.due(14));
}

// Steps `from`..`to` of `ms` each, their votes saying `busy`.
void steps(SnapshotCadence& c, std::int64_t from, std::int64_t to, double ms, bool busy = false) {
  for (std::int64_t k = from; k <= to; ++k) c.step_time(k, ms, busy);
}

// The first step at or after `from` that `auto` votes a snapshot due.
std::int64_t next_due(const SnapshotCadence& c, std::int64_t from) {
  std::int64_t k = from;
  while (!c.due(k) && k < from + 100000) ++k;
  return k;
}

// Auto on steps of 100 ms: its first snapshot (stalling `stall_ms`) after
// 10 quiet steps, whose median the touched steps are compared with.
SnapshotCadence auto_first_at_10(double stall_ms, bool fresh_image = false) {
  SnapshotCadence c(-1);
  steps(c, 1, 9, 100);
  EXPECT_FALSE(c.due(9));
  EXPECT_TRUE(c.due(10));
  c.taken(10, stall_ms, fresh_image);
  return c;
}

// Auto: the interval keeps what the snapshots cost the steps within 2% of
// a step.
TEST(SnapshotCadence, AutoKeepsTheCostTheStepsShowWithinItsShareOfAStep) {
  SnapshotCadence c = auto_first_at_10(30);
  // Step 10 began it (stall 30 ms), step 11's vote found it still under
  // way, step 12's found it done: 30 + 50 + 20 ms beyond the quiet 100 ms.
  c.step_time(10, 130, false);
  c.step_time(11, 150, true);
  EXPECT_EQ(next_due(c, 11), 20) << "not measured yet: the first interval";
  c.step_time(12, 120, false);
  steps(c, 13, 14, 100);
  // 100 ms against 2% of 100 ms: every 50 steps.
  EXPECT_EQ(next_due(c, 13), 60);
  c.taken(60, 10, false);
  // The next cost 300 ms: the running mean, (100 + 300) / 2 -> every 200 ms.
  c.step_time(60, 300, false);
  c.step_time(61, 200, false);
  EXPECT_EQ(next_due(c, 62), 160);
  // A snapshot touches the steps until a vote finds every rank's work
  // done, however many: 4 here, each 100 ms slower. The mean, (200 + 400)
  // / 2 -> every 150 steps.
  c.taken(160, 10, false);
  steps(c, 160, 162, 200, true);
  c.step_time(163, 200, false);
  EXPECT_EQ(next_due(c, 164), 160 + 150);
}

TEST(SnapshotCadence, AutoMeasuresAgainstTheMedianOfQuietSteps) {
  SnapshotCadence c(-1);
  // One slow step among the quiet ones (a disk save's writes, say) does not
  // move the median.
  steps(c, 1, 4, 100);
  c.step_time(5, 5000, false);
  steps(c, 6, 9, 100);
  c.taken(10, 5, false);
  c.step_time(10, 140, false);
  c.step_time(11, 100, false);
  EXPECT_EQ(next_due(c, 12), 10 + 20) << "40 ms: every 20 steps";
}

TEST(SnapshotCadence, AutoCountsTheStallAtLeastAndLeavesQuietSteps) {
  // Steps that happened to be fast hide nothing of the stall: 40 ms.
  SnapshotCadence fast = auto_first_at_10(40);
  fast.step_time(10, 90, false);
  fast.step_time(11, 90, false);
  EXPECT_EQ(next_due(fast, 12), 10 + 20);
  // A snapshot that cost nothing still leaves a quiet step after the two
  // it touched, to compare the next one with.
  SnapshotCadence free = auto_first_at_10(0);
  free.step_time(10, 100, false);
  free.step_time(11, 100, false);
  EXPECT_EQ(next_due(free, 12), 10 + 3);
}

TEST(SnapshotCadence, AutoMeasuresAgainAfterAFreshImage) {
  // A copy into freshly mapped pages costs more than the next will: it
  // does not enter the mean, and the next comes within 10 steps.
  SnapshotCadence c = auto_first_at_10(2900, /*fresh_image=*/true);
  c.step_time(10, 3000, false);
  c.step_time(11, 100, false);
  EXPECT_EQ(next_due(c, 12), 20);
  c.taken(20, 20, false);
  c.step_time(20, 120, false);
  c.step_time(21, 100, false);
  EXPECT_EQ(next_due(c, 22), 20 + 10) << "20 ms alone, not the fresh one's";
}

TEST(SnapshotCadence, AutoWaitsForStepsToCompareWith) {
  // A run resumed at step 500 has no quiet step yet: its first snapshot
  // comes 10 steps on, and a snapshot taken with none measured sets nothing.
  SnapshotCadence c(-1);
  c.resumed(500);
  EXPECT_EQ(next_due(c, 501), 510);
  c.taken(510, 800, false);
  c.step_time(510, 900, false);
  c.step_time(511, 900, false);
  EXPECT_EQ(next_due(c, 512), 520) << "the interval stays";
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
