// ht::resilience health checks on this machine: a healthy node passes with
// plausible values, impossible thresholds and an unusable checkpoint directory
// fail with reasons that name the values, HT_FAULTS' node-unhealthy fails the
// named node only, and the JSON report parses and round-trips.
#include "ht/resilience/health.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ht/comm/self_communicator.h"
#include "ht/core/device.h"
#include "test_util.h"

namespace ht::resilience {
namespace {

namespace fs = std::filesystem;
using test::throws_error;

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("ht_health_test_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       ::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  HealthOptions options() const {
    HealthOptions o;
    o.ckpt_dir = (dir_ / "ckpt").string();
    return o;
  }

  fs::path dir_;
};

const CheckResult& find(const HealthReport& r, const std::string& name) {
  for (const CheckResult& c : r.checks)
    if (c.name == name) return c;
  throw std::runtime_error("no check named " + name);
}

TEST_F(HealthTest, HealthyNodePassesEveryCheck) {
  const HealthReport r = run_health_checks(options(), nullptr);
  EXPECT_TRUE(r.ok) << format_health_report(r);
  EXPECT_FALSE(r.host.empty());
  EXPECT_EQ(r.node, -1);
  std::vector<std::string> names;
  for (const CheckResult& c : r.checks) {
    names.push_back(c.name);
    EXPECT_TRUE(c.ok) << c.name << ": " << c.reason;
    EXPECT_GE(c.ms, 0) << c.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"compute", "memory", "disk", "disk_write", "collectives", "gpu_devices",
                                             "gpu_ecc", "gpu_gemm"}));
  // Measured values are positive and above the (low) default minimums.
  const HealthOptions d;
  EXPECT_GE(find(r, "compute").value, d.min_gemm_gflops);
  EXPECT_EQ(find(r, "compute").unit, "GFLOP/s");
  EXPECT_EQ(find(r, "compute").threshold, d.min_gemm_gflops);
  EXPECT_GE(find(r, "memory").value, d.min_memory_gbps);
  EXPECT_GE(find(r, "disk").value, d.min_free_disk_gib);
  EXPECT_GE(find(r, "disk_write").value, d.min_disk_write_mbps);
  EXPECT_TRUE(fs::is_directory(dir_ / "ckpt"));   // created, as a run would
  EXPECT_TRUE(fs::is_empty(dir_ / "ckpt"));       // the probe file is gone
  // No communicator: collectives skipped; no GPU: skipped, never failed.
  EXPECT_TRUE(find(r, "collectives").skipped);
  if (cuda_device_count() == 0) {
    for (const char* gpu : {"gpu_devices", "gpu_ecc", "gpu_gemm"}) {
      EXPECT_TRUE(find(r, gpu).skipped) << gpu;
      EXPECT_EQ(find(r, gpu).reason.rfind("no GPU: skipped", 0), 0u) << find(r, gpu).reason;
    }
  } else {
    EXPECT_EQ(find(r, "gpu_devices").value, cuda_device_count());
    EXPECT_NE(find(r, "gpu_ecc").reason.find("NVML"), std::string::npos);
    EXPECT_GE(find(r, "gpu_gemm").value, d.min_gpu_gemm_gflops);
  }
}

TEST_F(HealthTest, GroupOfOneSkipsCollectives) {
  HealthOptions o = options();
  o.checks = parse_health_checks("collectives");
  auto self = comm::make_self_communicator();
  const HealthReport r = run_health_checks(o, self.get());
  ASSERT_EQ(r.checks.size(), 1u);
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.checks[0].skipped);
  EXPECT_NE(r.checks[0].reason.find("one rank"), std::string::npos);
}

TEST_F(HealthTest, ImpossibleThresholdsFailNamingValueAndThreshold) {
  HealthOptions o = options();
  o.min_gemm_gflops = 1e9;
  o.min_memory_gbps = 1e9;
  o.min_free_disk_gib = 1e9;
  o.min_disk_write_mbps = 1e9;
  o.checks.gpu = false;
  const HealthReport r = run_health_checks(o, nullptr);
  EXPECT_FALSE(r.ok);
  for (const char* name : {"compute", "memory", "disk", "disk_write"}) {
    const CheckResult& c = find(r, name);
    EXPECT_FALSE(c.ok) << name;
    EXPECT_GT(c.value, 0) << name;
    EXPECT_EQ(c.threshold, 1e9) << name;
    EXPECT_NE(c.reason.find(fmt::format("{:.3g} {}", c.value, c.unit)), std::string::npos) << c.reason;
    EXPECT_NE(c.reason.find(fmt::format("below the minimum 1e+09 {}", c.unit)), std::string::npos) << c.reason;
  }
  EXPECT_NE(format_health_report(r).find("UNHEALTHY (4 of 5 checks failed)"), std::string::npos)
      << format_health_report(r);
}

TEST_F(HealthTest, CheckpointDirectoryBelowARegularFileFails) {
  // Root ignores permission bits, so "unwritable" is staged as a path that
  // cannot exist: a directory below a regular file.
  fs::create_directories(dir_);
  const fs::path file = dir_ / "a_file";
  std::ofstream(file) << "x";
  const std::pair<fs::path, std::string> cases[] = {
      {file / "ckpt", "does not exist and cannot be created: Not a directory"}, {file, "is not a directory"}};
  for (const auto& [bad, why] : cases) {
    HealthOptions o = options();
    o.ckpt_dir = bad.string();
    o.checks = parse_health_checks("disk");
    const HealthReport r = run_health_checks(o, nullptr);
    EXPECT_FALSE(r.ok);
    const CheckResult& disk = find(r, "disk");
    EXPECT_FALSE(disk.ok);
    EXPECT_NE(disk.reason.find(fmt::format("checkpoint directory '{}' {}", bad.string(), why)),
              std::string::npos)
        << disk.reason;
    EXPECT_FALSE(find(r, "disk_write").ok);
    EXPECT_NE(find(r, "disk_write").reason.find("not run"), std::string::npos);
  }
}

TEST_F(HealthTest, NoCheckpointDirectorySkipsTheDiskChecks) {
  HealthOptions o;
  o.checks = parse_health_checks("disk");
  const HealthReport r = run_health_checks(o, nullptr);
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(find(r, "disk").skipped);
  EXPECT_TRUE(find(r, "disk_write").skipped);
}

TEST_F(HealthTest, FaultInjectionFailsTheNamedNodeOnly) {
  HealthOptions o = options();
  o.checks = parse_health_checks("compute");
  o.faults = "crash:rank=1:step=3,node-unhealthy:node=1,slow:rank=0:factor=2";
  o.node = 1;
  HealthReport r = run_health_checks(o, nullptr);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(find(r, "compute").ok);
  EXPECT_EQ(find(r, "compute").reason, "fault injected: node-unhealthy");
  EXPECT_EQ(r.node, 1);

  o.node = 0;
  r = run_health_checks(o, nullptr);
  EXPECT_TRUE(r.ok) << format_health_report(r);
  o.node = -1;  // no label: no fault applies
  EXPECT_TRUE(run_health_checks(o, nullptr).ok);

  o.faults = "node-unhealthy:node=two";
  EXPECT_TRUE(throws_error([&] { run_health_checks(o, nullptr); }, ErrorKind::kConfig,
                           {"node-unhealthy:node=two", "'two' is not a number"}));
  o.faults = "node-unhealthy";
  EXPECT_TRUE(
      throws_error([&] { run_health_checks(o, nullptr); }, ErrorKind::kConfig, {"node-unhealthy needs node=N"}));
}

TEST_F(HealthTest, JsonHasTheFieldsAndRoundTrips) {
  HealthOptions o = options();
  o.node = 3;
  o.faults = "node-unhealthy:node=3";
  o.checks.gpu = false;
  const HealthReport r = run_health_checks(o, nullptr);
  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j.at("host"), r.host);
  EXPECT_EQ(j.at("node"), 3);
  EXPECT_EQ(j.at("rank"), 0);
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_TRUE(j.at("version").is_string());
  ASSERT_EQ(j.at("checks").size(), r.checks.size());
  for (std::size_t i = 0; i < r.checks.size(); ++i) {
    const auto& c = j.at("checks")[i];
    for (const char* field : {"name", "ok", "skipped", "reason", "value", "unit", "threshold", "ms"})
      EXPECT_TRUE(c.contains(field)) << field;
    EXPECT_EQ(c.at("name"), r.checks[i].name);
    EXPECT_EQ(c.at("ok"), r.checks[i].ok);
    EXPECT_DOUBLE_EQ(c.at("value").get<double>(), r.checks[i].value);
  }
  EXPECT_EQ(j.at("checks")[0].at("reason"), "fault injected: node-unhealthy");

  const HealthReport back = health_report_from_json(to_json(r));
  EXPECT_EQ(to_json(back), to_json(r));

  // Merged: ok only when every rank's report is.
  HealthReport good = back;
  good.ok = true;
  good.rank = 1;
  const nlohmann::json merged = nlohmann::json::parse(to_json(std::vector<HealthReport>{back, good}));
  EXPECT_EQ(merged.at("ok"), false);
  EXPECT_EQ(merged.at("world_size"), 2);
  EXPECT_EQ(merged.at("reports")[1].at("rank"), 1);
  EXPECT_EQ(nlohmann::json::parse(to_json(std::vector<HealthReport>{good})).at("ok"), true);

  EXPECT_TRUE(throws_error([] { health_report_from_json("{\"host\": \"h\"}"); }, ErrorKind::kInvalidArgument,
                           {"malformed health report"}));
}

TEST_F(HealthTest, GatherOverAGroupOfOne) {
  HealthOptions o;
  o.checks = parse_health_checks("memory");
  o.memory_mib = 1;
  const HealthReport r = run_health_checks(o, nullptr);
  auto self = comm::make_self_communicator();
  const std::vector<HealthReport> all = gather_health_reports(r, *self);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(to_json(all[0]), to_json(r));
}

TEST(HealthChecksTest, ParsesNames) {
  const HealthChecks c = parse_health_checks("compute,disk");
  EXPECT_TRUE(c.compute && c.disk);
  EXPECT_FALSE(c.memory || c.collectives || c.gpu);
  const HealthChecks all = parse_health_checks("all");
  EXPECT_TRUE(all.compute && all.memory && all.disk && all.collectives && all.gpu);
  EXPECT_TRUE(throws_error([] { parse_health_checks("compute,network"); }, ErrorKind::kInvalidArgument,
                           {"'network'", "compute, memory, disk, collectives, gpu"}));
  HealthOptions o;
  o.memory_mib = 0;
  EXPECT_TRUE(throws_error([&] { run_health_checks(o, nullptr); }, ErrorKind::kInvalidArgument, {"memory_mib 0"}));
}

}  // namespace
}  // namespace ht::resilience
