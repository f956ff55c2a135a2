// The reliability plan (ht/plan/reliability.h) as a table and as JSON.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ht/plan/reliability.h"
#include "plan/failure_cost_json.h"

namespace ht::plan {

namespace {

// A duration in the unit a reader takes in at a glance.
std::string readable_duration(double s) {
  if (!std::isfinite(s)) return "never";
  if (s < 0.01) return fmt::format("{:.2f} ms", s * 1e3);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  if (s < 120) return fmt::format("{:.2f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

std::string thousands(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string interval_cell(std::int64_t asked, std::int64_t steps, double step_s) {
  if (steps == 0) return "none";
  return fmt::format("{}{} steps ({})", asked < 0 ? "auto: " : "", steps, readable_duration(double(steps) * step_s));
}

std::string cadence_row(std::string_view name, const EttrEstimate& e, double step_s) {
  return fmt::format("{:<12} {:<28} {:<28} {:>7.2f}% {:>7.2f}% {:>7.2f}% {:>8.2f}% {:>10.1f} {:>8.1f}  {:>5.1f}%\n",
                     name, interval_cell(e.cadence.snapshot_every_steps, e.snapshot_steps, step_s),
                     interval_cell(e.cadence.checkpoint_every_steps, e.checkpoint_steps, step_s), 100 * e.ettr_mean,
                     100 * e.ettr_p10, 100 * e.ettr_p90, 100 * e.no_failure_ettr, e.failures_per_trace,
                     e.steps_lost_mean, 100 * e.from_memory_share);
}

std::string percent_of(double part, double whole) {
  return fmt::format("{:.0f}%", whole > 0 ? 100 * part / whole : 0.0);
}

nlohmann::json json_seconds(double s) { return std::isfinite(s) ? nlohmann::json(s) : nlohmann::json(nullptr); }

nlohmann::json estimate_to_json(const EttrEstimate& e, double step_s) {
  return {{"snapshot_every_steps", e.cadence.snapshot_every_steps},
          {"checkpoint_every_steps", e.cadence.checkpoint_every_steps},
          {"snapshot_steps", e.snapshot_steps},
          {"checkpoint_steps", e.checkpoint_steps},
          {"snapshot_interval_s", double(e.snapshot_steps) * step_s},
          {"checkpoint_interval_s", double(e.checkpoint_steps) * step_s},
          {"ettr", e.ettr_mean},
          {"ettr_p10", e.ettr_p10},
          {"ettr_p90", e.ettr_p90},
          {"no_failure_ettr", e.no_failure_ettr},
          {"failures_per_trace", e.failures_per_trace},
          {"from_memory_share", e.from_memory_share},
          {"steps_lost_mean", e.steps_lost_mean},
          {"bounded_traces", e.bounded_traces},
          {"failure_cost", detail::failure_cost_json(e.cost)}};
}

}  // namespace

std::string format_reliability(const ReliabilityPlan& p) {
  const ReliabilityOptions& o = p.options;
  const double step_s = o.step_s;
  std::string s = fmt::format(
      "# ht-plan --reliability | {} hosts x {} GPUs ({} GPUs) | mean time to failure {} ({}) | memory recovers {:.0f}% "
      "of failures\n",
      thousands(o.hosts), o.gpus_per_host, thousands(o.gpus()), readable_duration(p.mttf_hours * 3600),
      p.published_mttf ? "Meta's published figures, Kokolis et al. 2024, log-log by GPU count" : "given",
      100 * (o.cadence.snapshot_every_steps != 0 ? o.memory_recoverable_share : 0.0));
  s += fmt::format(
      "# costs: step {} | detection {} | training again after detection: {} from memory, {} from disk, of which the "
      "healthy ranks' relaunch {} | stall {} a snapshot, {} a checkpoint | htrun back-off from {} (htrun's rule){}\n",
      readable_duration(step_s), readable_duration(o.detect_s), readable_duration(o.recover_memory_s), readable_duration(o.recover_disk_s),
      readable_duration(o.relaunch_s), readable_duration(o.snapshot_stall_s), readable_duration(o.checkpoint_stall_s),
      readable_duration(o.backoff_base_s),
      o.fault_free_efficiency > 0
          ? fmt::format(" | measured ETTR without failures {:.1f}% (in place of the stalls)", 100 * o.fault_free_efficiency)
          : std::string());
  s += fmt::format(
      "# simulated: {} traces of a {} job (seed {}), failures at exponential intervals; the engine's snapshot and "
      "checkpoint cadences, htrun's back-off\n",
      o.traces, readable_duration(o.job_hours * 3600), o.seed);
  s += fmt::format("# Young/Daly sqrt(2 C M): snapshots every {}, checkpoints every {}{}\n",
                   readable_duration(p.young_daly_snapshot_s), readable_duration(p.young_daly_checkpoint_s),
                   std::isfinite(p.young_daly_checkpoint_s) ? "" : " (no failure needs disk: a checkpoint is only its stall)");
  s += fmt::format("{:<12} {:<28} {:<28} {:>8} {:>8} {:>8} {:>9} {:>10} {:>8}  {:>6}\n", "cadence", "snapshot every",
                   "checkpoint every", "ETTR", "p10", "p90", "no fail.", "failures", "lost", "memory");
  s += cadence_row("configured", p.configured, step_s);
  if (p.has_auto) s += cadence_row("engine auto", p.auto_snapshots, step_s);
  s += cadence_row("Young/Daly", p.young_daly, step_s);
  s += cadence_row("chosen", p.chosen, step_s);
  const FailureCost& c = p.chosen.cost;
  const double total = c.total_s();
  if (p.chosen.failures_per_trace > 0) {
    s += fmt::format(
        "# a failure costs {} on average at the chosen cadence: detection {} ({}), back-off {} ({}), the healthy "
        "ranks' relaunch {} ({}), restore and first step {} ({}), work lost {} ({})\n",
        readable_duration(total), readable_duration(c.detect_s), percent_of(c.detect_s, total), readable_duration(c.backoff_s),
        percent_of(c.backoff_s, total), readable_duration(c.relaunch_s), percent_of(c.relaunch_s, total), readable_duration(c.restore_s),
        percent_of(c.restore_s, total), readable_duration(c.lost_work_s), percent_of(c.lost_work_s, total));
    s += fmt::format(
        "# keeping the healthy ranks alive across a failure (the replacement's ranks started ahead) would save their "
        "relaunch, {} of that: ETTR {:.3f}% instead of {:.3f}%\n",
        percent_of(c.relaunch_s, total), 100 * p.keeping_healthy_ranks.ettr_mean, 100 * p.chosen.ettr_mean);
  } else {
    s += "# no failure fell in the simulated traces\n";
  }
  s += "# columns: ETTR = productive training time / wall time over all the traces, p10 and p90 of the traces' "
       "own; no fail. = without failures; failures a trace; lost = steps lost a failure; memory = failures "
       "recovered from memory\n";
  s += "# projections from measured costs on simulated failure traces, not measurements at this size\n";
  return s;
}

std::string reliability_to_json(const ReliabilityPlan& p) {
  using nlohmann::json;
  const ReliabilityOptions& o = p.options;
  json searched = json::array();
  for (const EttrEstimate& e : p.searched) searched.push_back(estimate_to_json(e, o.step_s));
  return json{{"hosts", o.hosts},
              {"gpus_per_host", o.gpus_per_host},
              {"gpus", o.gpus()},
              {"mttf_hours", p.mttf_hours},
              {"mttf_source", p.published_mttf ? "Kokolis et al. 2024 (Meta), log-log by GPU count" : "given"},
              {"memory_recoverable_share", o.memory_recoverable_share},
              {"step_s", o.step_s},
              {"detect_s", o.detect_s},
              {"recover_memory_s", o.recover_memory_s},
              {"recover_disk_s", o.recover_disk_s},
              {"relaunch_s", o.relaunch_s},
              {"snapshot_stall_s", o.snapshot_stall_s},
              {"checkpoint_stall_s", o.checkpoint_stall_s},
              {"backoff_base_s", o.backoff_base_s},
              {"fault_free_efficiency", o.fault_free_efficiency},
              {"job_hours", o.job_hours},
              {"traces", o.traces},
              {"seed", o.seed},
              {"young_daly_snapshot_s", json_seconds(p.young_daly_snapshot_s)},
              {"young_daly_checkpoint_s", json_seconds(p.young_daly_checkpoint_s)},
              {"configured", estimate_to_json(p.configured, o.step_s)},
              {"auto_snapshots", p.has_auto ? estimate_to_json(p.auto_snapshots, o.step_s) : json(nullptr)},
              {"young_daly", estimate_to_json(p.young_daly, o.step_s)},
              {"chosen", estimate_to_json(p.chosen, o.step_s)},
              {"keeping_healthy_ranks", estimate_to_json(p.keeping_healthy_ranks, o.step_s)},
              {"relaunch_share", p.relaunch_share()},
              {"searched", searched}}
      .dump(2);
}

}  // namespace ht::plan
