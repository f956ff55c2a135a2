// The reliability model (ht/plan/reliability.h, run_measurements.h): the
// published failure rates, the simulator against closed forms, Young/Daly's
// interval at the simulated optimum, htrun's back-off, determinism, bad
// input, and a hand-made run's reports projected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "ht/core/error.h"
#include "ht/plan/reliability.h"
#include "ht/plan/run_measurements.h"
#include "ht/resilience/run_protocol.h"
#include "htrun/decisions.h"

namespace ht {
namespace {

const plan::RelaunchRules kRules{.failures_in_a_row = &htrun::failures_in_a_row, .backoff_s = &htrun::backoff_s};
constexpr double kNever = std::numeric_limits<double>::infinity();

// A job of round numbers: 1 s steps, 100 h.
plan::ReliabilityOptions round_job() {
  plan::ReliabilityOptions o;
  o.step_s = 1;
  o.job_hours = 100;
  o.traces = 50;
  o.snapshot_stall_s = 0.5;
  o.checkpoint_stall_s = 5;
  o.cadence = {.snapshot_every_steps = 10, .checkpoint_every_steps = 100};
  o.detect_s = 30;
  o.recover_memory_s = 60;
  o.recover_disk_s = 90;
  o.relaunch_s = 40;
  o.mttf_hours = 4;
  return o;
}

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(PublishedMttf, MetasFiguresAndLogLogBetween) {
  EXPECT_DOUBLE_EQ(plan::published_mttf_hours(1024), 7.9);
  EXPECT_NEAR(plan::published_mttf_hours(16384), 1.8, 1e-12);
  EXPECT_NEAR(plan::published_mttf_hours(131072) * 60, 14, 1e-9);
  // 4,096 is half way from 1,024 to 16,384 on a log scale: the geometric mean.
  EXPECT_NEAR(plan::published_mttf_hours(4096), std::sqrt(7.9 * 1.8), 1e-9);
  // Outside, each GPU fails as often as at the nearest figure.
  EXPECT_NEAR(plan::published_mttf_hours(512), 15.8, 1e-12);
  EXPECT_NEAR(plan::published_mttf_hours(262144) * 60, 7, 1e-9);
  double previous = kNever;
  for (std::int64_t g = 1; g <= (1 << 20); g *= 2) {
    EXPECT_LT(plan::published_mttf_hours(g), previous) << g;
    previous = plan::published_mttf_hours(g);
  }
  EXPECT_NE(error_of([] { plan::published_mttf_hours(0); }).find("at least 1"), std::string::npos);
}

TEST(YoungDaly, Formula) {
  EXPECT_NEAR(plan::young_daly_interval_s(10, 3600), std::sqrt(2.0 * 10 * 3600), 1e-9);
  EXPECT_EQ(plan::young_daly_interval_s(10, kNever), kNever);
}

TEST(Simulator, NoFailuresIsOneLessTheStallShare) {
  plan::ReliabilityOptions o = round_job();
  o.mttf_hours = kNever;
  const plan::EttrEstimate e = plan::simulate_ettr(o, kRules);
  // 360,000 steps: a snapshot every 10 (0.5 s), a checkpoint every 100 (5 s).
  const double steps = 100 * 3600, stalls = steps / 10 * 0.5 + steps / 100 * 5, wall = steps + stalls;
  EXPECT_NEAR(e.ettr_mean, 1 - stalls / wall, 1e-12);
  EXPECT_NEAR(e.no_failure_ettr, 1 - stalls / wall, 1e-12);
  EXPECT_EQ(e.ettr_p10, e.ettr_p90);
  EXPECT_EQ(e.failures_per_trace, 0);
  EXPECT_EQ(e.snapshot_steps, 10);
  EXPECT_EQ(e.checkpoint_steps, 100);
  // A measured efficiency takes the stalls' place.
  o.fault_free_efficiency = 0.93;
  EXPECT_NEAR(plan::simulate_ettr(o, kRules).ettr_mean, 0.93, 1e-12);
}

TEST(Simulator, FailureCostIsDetectionRecoveryAndHalfAnInterval) {
  // Memory recovers every failure, no stalls, failures rare enough that
  // none falls in a recovery: each costs detection + recovery + the work
  // since the last snapshot (half an interval on average).
  plan::ReliabilityOptions o = round_job();
  o.snapshot_stall_s = o.checkpoint_stall_s = 0;
  o.memory_recoverable_share = 1;
  o.cadence = {.snapshot_every_steps = 600, .checkpoint_every_steps = 0};
  o.mttf_hours = 20;
  o.job_hours = 2000;
  const plan::EttrEstimate e = plan::simulate_ettr(o, kRules);
  EXPECT_GT(e.failures_per_trace, 50);
  EXPECT_EQ(e.from_memory_share, 1);
  EXPECT_NEAR(e.cost.detect_s, o.detect_s, 0.05);
  EXPECT_NEAR(e.cost.relaunch_s, o.relaunch_s, 0.1);
  EXPECT_NEAR(e.cost.restore_s, o.recover_memory_s - o.relaunch_s, 0.1);
  EXPECT_LT(e.cost.backoff_s, 0.01);  // launches train past their checkpoint (but for 1 in 1,000)
  EXPECT_NEAR(e.cost.lost_work_s, 300, 15);
  EXPECT_NEAR(e.steps_lost_mean, 299.5, 15);
  // And the ETTR is what those costs leave: failures at one per M of wall
  // time W, each costing c, make W = J + c W / M, so J / W = 1 - c / M.
  const double cost_s = o.detect_s + o.recover_memory_s + 300;
  EXPECT_NEAR(e.ettr_mean, 1 - cost_s / (o.mttf_hours * 3600), 0.003);
}

TEST(Simulator, DoublingTheFailureRateLowersTheEttr) {
  plan::ReliabilityOptions o = round_job();
  const double at_4h = plan::simulate_ettr(o, kRules).ettr_mean;
  o.mttf_hours = 2;
  const double at_2h = plan::simulate_ettr(o, kRules).ettr_mean;
  EXPECT_LT(at_2h, at_4h - 0.005);
  // Published figures: 16,384 GPUs fail more often than 1,024.
  o.mttf_hours = 0;
  o.hosts = 128, o.gpus_per_host = 8;
  const double small = plan::simulate_ettr(o, kRules).ettr_mean;
  o.hosts = 2048;
  EXPECT_LT(plan::simulate_ettr(o, kRules).ettr_mean, small);
}

TEST(Simulator, DeterministicForASeed) {
  plan::ReliabilityOptions o = round_job();
  const plan::EttrEstimate a = plan::simulate_ettr(o, kRules), b = plan::simulate_ettr(o, kRules);
  EXPECT_EQ(a.ettr_mean, b.ettr_mean);
  EXPECT_EQ(a.ettr_p10, b.ettr_p10);
  EXPECT_EQ(a.failures_per_trace, b.failures_per_trace);
  EXPECT_EQ(a.cost.lost_work_s, b.cost.lost_work_s);
  o.seed = 2;
  EXPECT_NE(plan::simulate_ettr(o, kRules).ettr_mean, a.ettr_mean);
}

TEST(Simulator, AFailureDuringARecoveryPaysHtrunsBackoff) {
  plan::ReliabilityOptions o = round_job();
  o.recover_memory_s = 120;
  o.recover_disk_s = 150;
  o.mttf_hours = 0.05;  // 3 minutes: most recoveries are cut short
  o.job_hours = 5;
  const plan::EttrEstimate e = plan::simulate_ettr(o, kRules);
  EXPECT_GT(e.cost.backoff_s, 0.5);
  EXPECT_LE(e.cost.backoff_s, htrun::kMaxBackoffS);
  o.mttf_hours = 50;  // hardly any is
  o.job_hours = 1000;
  EXPECT_LT(plan::simulate_ettr(o, kRules).cost.backoff_s, 0.01);
}

TEST(Simulator, DiskFailuresLoseTheWorkSinceTheCheckpoint) {
  plan::ReliabilityOptions o = round_job();
  o.snapshot_stall_s = o.checkpoint_stall_s = 0;
  o.mttf_hours = 20;
  o.job_hours = 2000;
  o.memory_recoverable_share = 0;
  o.cadence = {.snapshot_every_steps = 10, .checkpoint_every_steps = 1000};
  const plan::EttrEstimate e = plan::simulate_ettr(o, kRules);
  EXPECT_EQ(e.from_memory_share, 0);
  EXPECT_NEAR(e.steps_lost_mean, 499.5, 25);
  EXPECT_NEAR(e.cost.restore_s, o.recover_disk_s - o.relaunch_s, 0.1);
}

TEST(Plan, YoungDalyIsWhereTheSimulatedCostIsNearItsMinimum) {
  // Snapshots that cost 20 s against failures every 2 h, all recovered from
  // memory: Young/Daly's interval sqrt(2 x 20 x 7200) = 537 s.
  plan::ReliabilityOptions o = round_job();
  o.snapshot_stall_s = 20;
  o.checkpoint_stall_s = 0;
  o.memory_recoverable_share = 1;
  o.mttf_hours = 2;
  o.job_hours = 400;
  o.cadence = {.snapshot_every_steps = 100, .checkpoint_every_steps = 0};
  const double young_daly_s = std::sqrt(2.0 * 20 * 7200);
  std::vector<double> ettr;
  for (int k = -3; k <= 3; ++k) {
    o.cadence.snapshot_every_steps = std::llround(std::ldexp(young_daly_s, k));
    ettr.push_back(plan::simulate_ettr(o, kRules).ettr_mean);
  }
  const std::size_t best = std::size_t(std::max_element(ettr.begin(), ettr.end()) - ettr.begin());
  EXPECT_EQ(best, 3u);  // Young/Daly's own
  EXPECT_GT(ettr[3], ettr[2] + 0.005);
  EXPECT_GT(ettr[3], ettr[4] + 0.005);
  EXPECT_GT(ettr[3], ettr[0] + 0.1);
  EXPECT_GT(ettr[3], ettr[6] + 0.1);

  o.cadence.snapshot_every_steps = 100;
  const plan::ReliabilityPlan p = plan::plan_reliability(o, kRules);
  EXPECT_NEAR(p.young_daly_snapshot_s, young_daly_s, 1e-9);
  EXPECT_EQ(p.young_daly_checkpoint_s, kNever);  // no failure needs disk
  EXPECT_EQ(p.young_daly.snapshot_steps, std::llround(young_daly_s));
  EXPECT_GT(p.chosen.snapshot_steps, young_daly_s / 2);
  EXPECT_LT(p.chosen.snapshot_steps, young_daly_s * 2);
  EXPECT_GE(p.chosen.ettr_mean, p.young_daly.ettr_mean);
  EXPECT_GE(p.chosen.ettr_mean, p.configured.ettr_mean);
  EXPECT_GT(p.young_daly.ettr_mean, p.chosen.ettr_mean - 0.003);
}

TEST(Plan, RelaunchShareAndKeepingHealthyRanks) {
  plan::ReliabilityOptions o = round_job();
  const plan::ReliabilityPlan p = plan::plan_reliability(o, kRules);
  EXPECT_GT(p.relaunch_share(), 0.05);
  EXPECT_LT(p.relaunch_share(), 1);
  EXPECT_NEAR(p.relaunch_share(), p.chosen.cost.relaunch_s / p.chosen.cost.total_s(), 1e-12);
  EXPECT_GT(p.keeping_healthy_ranks.ettr_mean, p.chosen.ettr_mean);
  EXPECT_EQ(p.keeping_healthy_ranks.cost.relaunch_s, 0);
  EXPECT_TRUE(p.has_auto);
  EXPECT_EQ(p.auto_snapshots.cadence.snapshot_every_steps, -1);
  // The engine's auto keeps a snapshot within 2% of a step: 0.5 s a 1 s step, every 25 steps.
  EXPECT_EQ(p.auto_snapshots.snapshot_steps, 25);
  EXPECT_FALSE(p.searched.empty());
  EXPECT_NE(plan::format_reliability(p).find("Young/Daly"), std::string::npos);
  EXPECT_NE(plan::reliability_to_json(p).find("\"relaunch_share\""), std::string::npos);
}

TEST(Options, BadInputIsRefusedSayingWhatToGive) {
  const auto refused = [](auto change) {
    plan::ReliabilityOptions o = round_job();
    change(o);
    return error_of([&] { plan::simulate_ettr(o, kRules); });
  };
  EXPECT_NE(refused([](auto& o) { o.hosts = 0; }).find("--hosts 0: give at least 1"), std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.step_s = 0; }).find("--step-s 0"), std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.memory_recoverable_share = 1.5; }).find("from 0 to 1"), std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.mttf_hours = -1; }).find("--mttf-hours -1"), std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.relaunch_s = 100; }).find("give at most 60"), std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.detect_s = -1; }).find("--detect-s -1"), std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.cadence.snapshot_every_steps = -2; }).find("--snapshot-every-steps -2"),
            std::string::npos);
  EXPECT_NE(refused([](auto& o) { o.traces = 0; }).find("--traces 0"), std::string::npos);
  EXPECT_NE(error_of([] { plan::simulate_ettr(round_job(), {}); }).find("htrun::failures_in_a_row"),
            std::string::npos);
}

// A run directory as htrun leaves it: its report, and for the fault-free
// run rank 0's metrics.jsonl.
class RunReports : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ht_reliability_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "free");
    std::filesystem::create_directories(dir_ / "chaos");
    // 2000 steps of 5 ms, a snapshot every 10 steps 0.5 ms longer, a save every 500 3 ms longer.
    std::ofstream metrics(dir_ / "free" / "metrics.jsonl");
    double productive_s = 0;
    for (int step = 1; step <= 2000; ++step) {
      resilience::StepLine l;
      l.step = step;
      l.snapshot = step % 10 == 0;
      l.checkpoint = step % 500 == 0;
      l.step_ms = 5 + (l.snapshot ? 0.5 : 0) + (l.checkpoint ? 3 : 0);
      productive_s += l.step_ms / 1e3;
      metrics << resilience::format_metrics_line(l) << "\n";
    }
    metrics << "{\"type\":\"step\",\"step\":20";  // cut short by a crash
    metrics.close();
    free_productive_s_ = productive_s;
    std::ofstream(dir_ / "free" / "htrun_report.json")
        << free_report(productive_s, productive_s / 0.9);
    // Three crashes in 30 s, each detected in 0.2 s, training again 0.8 s
    // later from memory+peer (the launch 0.05 s after detection), 5 steps lost.
    std::string incidents, launches = R"({"launch":1,"started_at":1000.0})";
    for (int i = 0; i < 3; ++i) {
      const double detected_at = 1005 + 8 * i;
      incidents += (i ? "," : "") + std::string(R"({"kind":"host-lost","detection_latency_s":0.2,"detected_at":)") +
                   std::to_string(detected_at) +
                   R"(,"recovery_s":0.8,"steps_lost":5,"resume_tier":"memory+peer","resumed_from":100})";
      launches += R"(,{"launch":)" + std::to_string(i + 2) + R"(,"started_at":)" + std::to_string(detected_at + 0.05) + "}";
    }
    std::ofstream(dir_ / "chaos" / "htrun_report.json")
        << R"({"verdict":"finished","wall_s":30.0,"productive_s":)" << productive_s << R"(,"incidents":[)" << incidents
        << R"(],"launches":[)" << launches << "]}";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string free_report(double productive_s, double wall_s) {
    return R"({"verdict":"finished","incidents":[],"launches":[],"wall_s":)" + std::to_string(wall_s) +
           R"(,"productive_s":)" + std::to_string(productive_s) + "}";
  }
  std::string report(const char* run) const { return (dir_ / run / "htrun_report.json").string(); }

  std::filesystem::path dir_;
  double free_productive_s_ = 0;
};

TEST_F(RunReports, MeasurementsAndTheirOptions) {
  const plan::RunMeasurements m = plan::read_run_measurements(report("chaos"), report("free"));
  EXPECT_EQ(m.incidents, 3);
  EXPECT_NEAR(m.detect_s, 0.2, 1e-12);
  EXPECT_EQ(m.from_memory, 3);
  EXPECT_EQ(m.from_disk, 0);
  EXPECT_NEAR(m.recover_memory_s, 0.8, 1e-12);
  EXPECT_EQ(m.relaunches, 3);
  EXPECT_NEAR(m.relaunch_s, 0.75 - m.step_s, 1e-6);  // launch to first step, less the step
  EXPECT_NEAR(m.steps_lost_mean, 5, 1e-12);
  EXPECT_NEAR(m.fault_free_goodput, 0.9, 1e-6);
  EXPECT_EQ(m.steps, 2000);
  EXPECT_EQ(m.snapshot_every_steps, 10);
  EXPECT_EQ(m.checkpoint_every_steps, 500);
  // Medians beyond the others' 5 ms: snapshots 0.5 ms (four of them also
  // saved, 3 ms more), saves 3.5 ms (each of them also snapshotted).
  EXPECT_NEAR(m.snapshot_stall_s, 0.5e-3, 1e-9);
  EXPECT_NEAR(m.checkpoint_stall_s, 3.5e-3, 1e-9);
  EXPECT_NEAR(m.step_s, free_productive_s_ / 2000, 1e-9);

  const plan::ReliabilityOptions o = plan::options_from_run(m, {});
  EXPECT_NEAR(o.mttf_hours * 3600, 10, 1e-9);
  EXPECT_EQ(o.memory_recoverable_share, 1);
  EXPECT_NEAR(o.recover_disk_s - o.recover_memory_s, plan::ReliabilityOptions{}.recover_disk_s -
                                                          plan::ReliabilityOptions{}.recover_memory_s, 1e-12);
  EXPECT_EQ(o.fault_free_efficiency, m.fault_free_goodput);
  EXPECT_EQ(o.cadence.snapshot_every_steps, 10);
  EXPECT_NEAR(o.job_hours * 3600, free_productive_s_, 1e-9);
}

TEST_F(RunReports, ProjectionNearTheClosedForm) {
  const plan::RunMeasurements m = plan::read_run_measurements(report("chaos"), report("free"));
  plan::ReliabilityOptions base;
  base.traces = 2000;
  base.backoff_base_s = 0.2;
  const plan::RunProjection p = plan::project_run(m, base, kRules);
  // Failures at one per M = 10 s of wall time, each costing c = detection +
  // recovery + half a snapshot interval's steps: the wall time W = W0 + c W
  // / M, so the goodput is the fault-free one times 1 - c / M (nearly: a
  // tenth of the failures fall in a recovery, which costs a back-off more
  // and cuts the recovery it falls in short).
  const double cost_s = 0.2 + 0.8 + 5 * m.step_s / m.fault_free_goodput;
  EXPECT_NEAR(p.projected.ettr_mean, m.fault_free_goodput * (1 - cost_s / 10), 0.005);
  EXPECT_NEAR(p.projected.failures_per_trace, m.fault_free_wall_s / (10 - cost_s), 0.2);
  EXPECT_NEAR(p.difference_points(), 100 * (p.projected.ettr_mean - m.goodput), 1e-9);
  EXPECT_NE(plan::format_run_projection(p).find("projected goodput"), std::string::npos);
  EXPECT_NE(plan::run_projection_to_json(p).find("\"difference_points\""), std::string::npos);
}

TEST_F(RunReports, NotAReportIsRefused) {
  std::ofstream(dir_ / "chaos" / "htrun_report.json") << R"({"verdict":"finished"})";
  EXPECT_NE(error_of([&] { plan::read_run_measurements(report("chaos"), report("free")); }).find("no field 'wall_s'"),
            std::string::npos);
  std::ofstream(dir_ / "chaos" / "htrun_report.json") << "not json";
  EXPECT_NE(error_of([&] { plan::read_run_measurements(report("chaos"), report("free")); }).find("not htrun's report"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan::read_run_measurements(report("nowhere"), report("free")); }).find("cannot read"),
            std::string::npos);
}

}  // namespace
}  // namespace ht
