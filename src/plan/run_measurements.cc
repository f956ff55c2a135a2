// A run's measurements as the reliability model's inputs, and the projection
// of its own goodput (ht/plan/run_measurements.h).
// htrun's report is read with the run protocol's reader
// (ht/resilience/supervisor_report.h).
#include "ht/plan/run_measurements.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <variant>
#include <vector>

#include "ht/core/error.h"
#include "ht/resilience/run_protocol.h"
#include "ht/resilience/supervisor_report.h"
#include "plan/failure_cost_json.h"

namespace ht::plan {

namespace {

resilience::SupervisorReport read_report(const std::string& path) {
  resilience::SupervisorReport r;
  try {
    r = resilience::read_supervisor_report(path);
  } catch (const resilience::ProtocolError& e) {
    throw Error(ErrorKind::kConfig, fmt::format("'{}' is not htrun's report (htrun_report.json): {}; give the "
                                                "htrun_report.json htrun wrote at the end of a run",
                                                path, e.what()));
  }
  HT_CHECK(r.wall_s > 0, ErrorKind::kConfig, "'{}' has a wall time of {} s: give a finished run's report", path,
           r.wall_s);
  return r;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

// The most common gap between consecutive steps of `at` (one step alone:
// itself, as saves on multiples of their interval begin there).
std::int64_t common_gap(const std::vector<std::int64_t>& at) {
  if (at.empty()) return 0;
  if (at.size() == 1) return at[0];
  std::map<std::int64_t, int> count;
  for (std::size_t i = 1; i < at.size(); ++i) ++count[at[i] - at[i - 1]];
  return std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

// The fault-free run's steps, from its metrics.jsonl: a line cut short at
// the end (a crash) is skipped; a run relaunched keeps each step's last line.
void read_fault_free_metrics(const std::string& run_dir, RunMeasurements& m) {
  std::ifstream in(resilience::metrics_path(run_dir));
  if (!in) return;
  std::map<std::int64_t, resilience::StepLine> steps;
  for (std::string line; std::getline(in, line);) {
    try {
      if (auto l = resilience::parse_metrics_line(line); l && std::holds_alternative<resilience::StepLine>(*l)) {
        const auto& s = std::get<resilience::StepLine>(*l);
        steps[s.step] = s;
      }
    } catch (const resilience::ProtocolError&) {
    }
  }
  if (steps.empty()) return;
  std::vector<double> all, quiet, snapshot, checkpoint;
  std::vector<std::int64_t> snapshots_at, saves_at;
  for (const auto& [step, s] : steps) {
    all.push_back(s.step_ms);
    if (s.snapshot) snapshot.push_back(s.step_ms), snapshots_at.push_back(step);
    if (s.checkpoint) checkpoint.push_back(s.step_ms), saves_at.push_back(step);
    if (!s.snapshot && !s.checkpoint) quiet.push_back(s.step_ms);
  }
  const double baseline_ms = median_of(quiet);
  m.steps = std::int64_t(steps.size());
  m.step_s = mean_of(all) / 1e3;
  m.snapshot_every_steps = common_gap(snapshots_at);
  m.checkpoint_every_steps = common_gap(saves_at);
  // Medians, as the engine's auto cadence measures a snapshot's cost:
  // step times on a shared machine are skewed (in the chaos scenario's
  // fault-free run the steps without either averaged 5.20 ms, their median
  // 4.65 ms), and a mean would count the noise of a few slow steps.
  m.snapshot_stall_s = snapshot.empty() ? 0 : std::max(0.0, median_of(snapshot) - baseline_ms) / 1e3;
  m.checkpoint_stall_s = checkpoint.empty() ? 0 : std::max(0.0, median_of(checkpoint) - baseline_ms) / 1e3;
}

nlohmann::json measured_json(const RunMeasurements& m) {
  return {{"wall_s", m.wall_s},
          {"productive_s", m.productive_s},
          {"goodput", m.goodput},
          {"incidents", m.incidents},
          {"detect_s", m.detect_s},
          {"from_memory", m.from_memory},
          {"from_disk", m.from_disk},
          {"recover_memory_s", m.recover_memory_s},
          {"recover_disk_s", m.recover_disk_s},
          {"relaunches", m.relaunches},
          {"relaunch_s", m.relaunch_s},
          {"steps_lost_mean", m.steps_lost_mean},
          {"fault_free_wall_s", m.fault_free_wall_s},
          {"fault_free_productive_s", m.fault_free_productive_s},
          {"fault_free_goodput", m.fault_free_goodput},
          {"steps", m.steps},
          {"step_s", m.step_s},
          {"snapshot_every_steps", m.snapshot_every_steps},
          {"checkpoint_every_steps", m.checkpoint_every_steps},
          {"snapshot_stall_s", m.snapshot_stall_s},
          {"checkpoint_stall_s", m.checkpoint_stall_s}};
}

RunMeasurements read_measurements(const std::string& report_path, const std::string& fault_free_report_path) {
  RunMeasurements m;
  const resilience::SupervisorReport free = read_report(fault_free_report_path);
  m.fault_free_wall_s = free.wall_s;
  m.fault_free_productive_s = free.productive_s;
  m.fault_free_goodput = m.fault_free_productive_s / m.fault_free_wall_s;
  HT_CHECK(m.fault_free_productive_s > 0, ErrorKind::kConfig,
           "'{}' trained nothing (productive time 0 s): give the report of a fault-free run that trained",
           fault_free_report_path);
  read_fault_free_metrics(std::filesystem::path(fault_free_report_path).parent_path().string(), m);

  const resilience::SupervisorReport r = read_report(report_path);
  m.wall_s = r.wall_s;
  m.productive_s = r.productive_s;
  m.goodput = m.productive_s / m.wall_s;
  std::vector<double> detect, memory, disk, relaunch, lost;
  for (const resilience::Incident& i : r.incidents) {
    ++m.incidents;
    detect.push_back(i.detection_latency_s);
    lost.push_back(double(i.steps_lost));
    if (!i.recovery_s) continue;  // no relaunch trained after it
    const double recovery_s = *i.recovery_s;
    if (i.resume_tier.starts_with("memory")) memory.push_back(recovery_s);
    if (i.resume_tier == "disk") disk.push_back(recovery_s);
    // The launch after it: the first to start once it was detected.
    for (const resilience::LaunchRecord& l : r.launches)
      if (l.started_at >= i.detected_at) {
        relaunch.push_back(std::clamp(i.detected_at + recovery_s - l.started_at - m.step_s, 0.0, recovery_s));
        break;
      }
  }
  m.detect_s = mean_of(detect);
  m.from_memory = int(memory.size());
  m.from_disk = int(disk.size());
  m.recover_memory_s = mean_of(memory);
  m.recover_disk_s = mean_of(disk);
  m.relaunches = int(relaunch.size());
  m.relaunch_s = mean_of(relaunch);
  m.steps_lost_mean = mean_of(lost);
  return m;
}

}  // namespace

RunMeasurements read_run_measurements(const std::string& report_path, const std::string& fault_free_report_path) {
  return read_measurements(report_path, fault_free_report_path);
}

ReliabilityOptions options_from_run(const RunMeasurements& m, ReliabilityOptions base) {
  ReliabilityOptions o = base;
  o.mttf_hours = m.incidents > 0 ? m.wall_s / m.incidents / 3600 : std::numeric_limits<double>::infinity();
  if (m.incidents > 0) o.detect_s = m.detect_s;
  const double disk_beyond_memory_s = std::max(0.0, base.recover_disk_s - base.recover_memory_s);
  if (m.from_memory > 0) o.recover_memory_s = m.recover_memory_s;
  if (m.from_disk > 0) o.recover_disk_s = m.recover_disk_s;
  if (m.from_memory > 0 && m.from_disk == 0) o.recover_disk_s = o.recover_memory_s + disk_beyond_memory_s;
  if (m.from_disk > 0 && m.from_memory == 0) o.recover_memory_s = std::max(0.0, o.recover_disk_s - disk_beyond_memory_s);
  if (m.from_memory + m.from_disk > 0) o.memory_recoverable_share = double(m.from_memory) / (m.from_memory + m.from_disk);
  if (m.relaunches > 0) o.relaunch_s = m.relaunch_s;
  o.relaunch_s = std::min({o.relaunch_s, o.recover_memory_s, o.recover_disk_s});
  o.fault_free_efficiency = m.fault_free_goodput;
  if (m.steps > 0) {
    o.step_s = m.step_s;
    o.cadence = {.snapshot_every_steps = m.snapshot_every_steps, .checkpoint_every_steps = m.checkpoint_every_steps};
    o.snapshot_stall_s = m.snapshot_stall_s;
    o.checkpoint_stall_s = m.checkpoint_stall_s;
  }
  o.job_hours = m.fault_free_productive_s / 3600;
  return o;
}

RunProjection project_run(const RunMeasurements& m, const ReliabilityOptions& base, const RelaunchRules& rules) {
  RunProjection p{.measured = m, .options = options_from_run(m, base), .projected = {}};
  p.projected = simulate_ettr(p.options, rules);
  return p;
}

std::string format_run_projection(const RunProjection& p) {
  const RunMeasurements& m = p.measured;
  const ReliabilityOptions& o = p.options;
  const EttrEstimate& e = p.projected;
  const auto tier = [](int n, double recover_s, const char* from) {
    return n > 0 ? fmt::format("{:.2f} s from {} ({} incident(s))", recover_s, from, n)
                 : fmt::format("none from {}", from);
  };
  std::string s = fmt::format(
      "# measured, the run: {} incident(s) in {:.1f} s, detection {:.2f} s, training again after it {}, {}, of which "
      "a launch to its first step {:.2f} s; {:.1f} steps lost a failure; goodput {:.1f}%\n",
      m.incidents, m.wall_s, m.detect_s, tier(m.from_memory, m.recover_memory_s, "memory"),
      tier(m.from_disk, m.recover_disk_s, "disk"), m.relaunch_s, m.steps_lost_mean, 100 * m.goodput);
  s += fmt::format(
      "# measured, the fault-free run: goodput {:.1f}% ({:.1f} s of {:.1f} s), {} steps of {:.2f} ms, snapshots every "
      "{} steps (stall {:.2f} ms), checkpoints every {} steps (stall {:.2f} ms)\n",
      100 * m.fault_free_goodput, m.fault_free_productive_s, m.fault_free_wall_s, m.steps, 1e3 * m.step_s,
      m.snapshot_every_steps, 1e3 * m.snapshot_stall_s, m.checkpoint_every_steps, 1e3 * m.checkpoint_stall_s);
  s += fmt::format(
      "# simulated: {} traces of the fault-free run's {:.1f} s of training at its goodput, failures at exponential "
      "intervals at the run's rate (one every {:.1f} s), memory recovering {:.0f}%, htrun back-off {:.1f} s, seed {}\n",
      o.traces, o.job_hours * 3600, o.mttf_hours * 3600, 100 * o.memory_recoverable_share, o.backoff_base_s, o.seed);
  s += fmt::format(
      "projected goodput {:.1f}% (p10 {:.1f}%, p90 {:.1f}%; {:.1f} failures a trace, {:.1f} steps lost a failure), "
      "measured {:.1f}%: {:+.1f} points\n",
      100 * e.ettr_mean, 100 * e.ettr_p10, 100 * e.ettr_p90, e.failures_per_trace, e.steps_lost_mean, 100 * m.goodput,
      p.difference_points());
  return s;
}

std::string run_projection_to_json(const RunProjection& p) {
  const ReliabilityOptions& o = p.options;
  const EttrEstimate& e = p.projected;
  return nlohmann::json{
      {"measured", measured_json(p.measured)},
      {"options",
       {{"mttf_hours", o.mttf_hours},
        {"memory_recoverable_share", o.memory_recoverable_share},
        {"step_s", o.step_s},
        {"snapshot_every_steps", o.cadence.snapshot_every_steps},
        {"checkpoint_every_steps", o.cadence.checkpoint_every_steps},
        {"detect_s", o.detect_s},
        {"recover_memory_s", o.recover_memory_s},
        {"recover_disk_s", o.recover_disk_s},
        {"relaunch_s", o.relaunch_s},
        {"backoff_base_s", o.backoff_base_s},
        {"fault_free_efficiency", o.fault_free_efficiency},
        {"job_hours", o.job_hours},
        {"traces", o.traces},
        {"seed", o.seed}}},
      {"projected",
       {{"goodput", e.ettr_mean},
        {"goodput_p10", e.ettr_p10},
        {"goodput_p90", e.ettr_p90},
        {"failures_per_trace", e.failures_per_trace},
        {"steps_lost_mean", e.steps_lost_mean},
        {"from_memory_share", e.from_memory_share},
        {"failure_cost", detail::failure_cost_json(e.cost)}}},
      {"difference_points", p.difference_points()}}
      .dump(2);
}

}  // namespace ht::plan
