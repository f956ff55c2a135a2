// The reliability model (ht/plan/reliability.h): published failure rates,
// Young/Daly, the failure-trace simulator and the interval search.
#include "ht/plan/reliability.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "ht/core/error.h"
#include "ht/core/rng.h"
#include "train/policies.h"

namespace ht::plan {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Meta's published job mean time to failure (Kokolis et al., 2024): GPUs, hours.
struct PublishedMttf {
  double gpus, hours;
};
constexpr PublishedMttf kPublishedMttf[] = {{1024, 7.9}, {16384, 1.8}, {131072, 14.0 / 60}};

// A trace ends at this many times the job's wall time without failures,
// its ETTR then what it trained by then (10% at most): a job that fails
// faster than it recovers never ends, and its trace must.
constexpr double kTraceWallBound = 10;
// Young/Daly's interval times 2^-4 ... 2^4: the search's candidates.
constexpr int kSearchOctaves = 4;
// Rounds of the coordinate search at most (it ends when one changes nothing).
constexpr int kSearchRounds = 4;
// The longest interval the search tries, in steps: walking a cadence costs
// a few nanoseconds a step, and three intervals are walked (below).
constexpr std::int64_t kLongestSearchedSteps = 10'000'000;
// SnapshotCadence's longest `auto` interval (policies.cc clamps it to
// 100000 steps): how far the walk below may have to go to see it settle.
constexpr std::int64_t kAutoLongestSteps = 100'000;
// The walks see a launch that resumed from step 1, not a multiple of any
// interval above 1, so counting from the resume and counting from step 0
// tell apart.
constexpr std::int64_t kWalkResume = 1;
// Equal gaps in a row before a cadence counts as settled.
constexpr int kSettledGaps = 3;

// When the engine snapshots or saves, as the simulator uses it: every
// `period` steps, counted from the step a launch resumed from or on the
// multiples of the period.
struct Periodic {
  std::int64_t period = 0;  // 0: never
  bool from_resume = true;

  // The newest event at or before `step` in a launch that resumed from
  // `resume` (counted from it: `resume` itself when none came yet).
  std::int64_t last_at(std::int64_t step, std::int64_t resume) const {
    if (from_resume) return resume + (step - resume) / period * period;
    return step / period * period;
  }
};

// The engine's memory snapshots (train::SnapshotCadence), walked step by
// step over simulated step times as Engine::agree_on_step and save_if_due
// call it: rank 0's vote, the snapshot, then the step's time (its stall in
// it), until its intervals settle. Fixed intervals count from the step
// resumed from; `auto` measures what its snapshots cost and settles within
// its budget of a step (its first interval after a start, 10 steps while it
// measures, is left out: the simulator uses the settled one throughout).
// Images are taken as already mapped (a long job's steady state).
Periodic walk_snapshot_cadence(std::int64_t every, double step_s, double stall_s) {
  if (every == 0) return {};
  train::SnapshotCadence cadence(every);
  cadence.resumed(kWalkResume);
  const double step_ms = step_s * 1e3, stall_ms = stall_s * 1e3;
  const std::int64_t longest = every > 0 ? every : kAutoLongestSteps;
  const std::int64_t last = kWalkResume + longest * (kSettledGaps + 3);
  std::int64_t first = -1, previous = -1, gap = 0;
  int same = 0;
  for (std::int64_t step = kWalkResume + 1; step <= last && same < kSettledGaps; ++step) {
    const bool due = cadence.due(step);
    if (due) {
      cadence.taken(step, stall_ms, /*fresh_image=*/false);
      if (previous >= 0) {
        same = step - previous == gap ? same + 1 : 1;
        gap = step - previous;
      } else {
        first = step;
      }
      previous = step;
    }
    cadence.step_time(step, step_ms + (due ? stall_ms : 0.0), /*snapshot_busy=*/false);
  }
  HT_CHECK(same >= kSettledGaps, ErrorKind::kInternal,
           "reliability: the engine's snapshot cadence (every {}) did not settle on an interval within {} steps; "
           "the model assumes it does (train/policies.h)",
           every, last - kWalkResume);
  HT_CHECK(every < 0 || first - kWalkResume == gap, ErrorKind::kInternal,
           "reliability: the engine's snapshot cadence (every {}) no longer counts from the step resumed from (first "
           "snapshot {} steps after it, then every {}); teach the model its rule (train/policies.h)",
           every, first - kWalkResume, gap);
  return {.period = gap, .from_resume = true};
}

// The engine's disk checkpoints (train::CheckpointCadence) by steps, built
// anew as a relaunch builds them and walked from a resumed step. Its
// time-based saves are left out: the candidates here are in steps.
Periodic walk_checkpoint_cadence(std::int64_t every_steps) {
  if (every_steps == 0) return {};
  train::CheckpointCadence cadence(every_steps, 0);
  const std::int64_t last = kWalkResume + every_steps * (kSettledGaps + 2);
  std::vector<std::int64_t> saves;
  for (std::int64_t step = kWalkResume + 1; step <= last && saves.size() < std::size_t(kSettledGaps + 1); ++step)
    if (cadence.save_now(step, /*by_time=*/false, /*suspect=*/false)) saves.push_back(step);
  HT_CHECK(saves.size() == std::size_t(kSettledGaps + 1), ErrorKind::kInternal,
           "reliability: the engine's checkpoint cadence (every {} steps) saved {} time(s) in {} steps", every_steps,
           saves.size(), last - kWalkResume);
  const std::int64_t gap = saves[1] - saves[0];
  for (std::size_t i = 1; i < saves.size(); ++i)
    HT_CHECK(saves[i] - saves[i - 1] == gap, ErrorKind::kInternal,
             "reliability: the engine's checkpoint cadence (every {} steps) saves at uneven intervals", every_steps);
  const bool on_multiples = saves[0] % gap == 0;
  HT_CHECK(on_multiples || saves[0] - kWalkResume == gap, ErrorKind::kInternal,
           "reliability: the engine's checkpoint cadence (every {} steps) saves neither on multiples of its interval "
           "nor counting from the step resumed from; teach the model its rule (train/policies.h)",
           every_steps);
  return {.period = gap, .from_resume = !on_multiples};
}

// A cadence as one trace walks it.
struct Walk {
  Periodic snapshots, checkpoints;
  double step_wall_s = 0;  // a step with its share of the stalls (or at the measured efficiency)
  std::int64_t steps = 0;  // the job's
};

Walk make_walk(const ReliabilityOptions& o, const Cadence& c) {
  Walk w;
  w.snapshots = walk_snapshot_cadence(c.snapshot_every_steps, o.step_s, o.snapshot_stall_s);
  w.checkpoints = walk_checkpoint_cadence(c.checkpoint_every_steps);
  // Stalls spread over the steps: a trace's wall time is its steps' sum,
  // and a failure loses the mean share of them with its steps.
  w.step_wall_s = o.fault_free_efficiency > 0
                      ? o.step_s / o.fault_free_efficiency
                      : o.step_s + (w.snapshots.period > 0 ? o.snapshot_stall_s / double(w.snapshots.period) : 0.0) +
                            (w.checkpoints.period > 0 ? o.checkpoint_stall_s / double(w.checkpoints.period) : 0.0);
  w.steps = std::max<std::int64_t>(1, std::llround(o.job_hours * 3600 / o.step_s));
  return w;
}

// One trace's failures: each draws, in this order, whether memory can
// recover it and the interval to the next, so that every cadence simulated
// meets the same failures (common random numbers: the search compares
// cadences, not traces).
class FailureDraws {
 public:
  FailureDraws(std::uint64_t seed, int trace) : rng_(seed * 0x100000001b3ull + std::uint64_t(trace)) {}
  double interval_s(double mttf_s) { return std::isfinite(mttf_s) ? -mttf_s * std::log1p(-uniform()) : kInfinity; }
  bool needs_disk(double memory_share) { return uniform() >= memory_share; }

 private:
  double uniform() { return double(rng_.next_u64() >> 11) * 0x1.0p-53; }
  Rng rng_;
};

struct TraceResult {
  double productive_s = 0, wall_s = 0;
  int failures = 0, from_memory = 0;
  std::int64_t steps_lost = 0;
  bool bounded = false;
  FailureCost cost;  // sums
};

// The time from a failure to `until` (training again, or the next failure)
// into the phases of its recovery, in order.
void add_phases(FailureCost& c, double spent_s, double detect_s, double backoff_s, double relaunch_s,
                double restore_s) {
  const auto take = [&](double& into, double phase_s) {
    const double x = std::clamp(spent_s, 0.0, phase_s);
    into += x;
    spent_s -= x;
  };
  take(c.detect_s, detect_s);
  take(c.backoff_s, backoff_s);
  take(c.relaunch_s, relaunch_s);
  take(c.restore_s, restore_s);
}

TraceResult simulate_trace(const ReliabilityOptions& o, const RelaunchRules& rules, const Walk& w, double mttf_s,
                           int trace) {
  FailureDraws draws(o.seed, trace);
  const bool memory_tier = w.snapshots.period > 0;
  const double bound_s = kTraceWallBound * double(w.steps) * w.step_wall_s;
  TraceResult r;
  double t = 0, next_failure = draws.interval_s(mttf_s);
  std::int64_t resume = 0, progress = 0;
  int in_a_row = 0;
  for (bool ended = false; !ended;) {
    // Training from `resume`, from t, until the job ends, a failure, or the bound.
    const double end = t + double(w.steps - resume) * w.step_wall_s;
    if (end <= next_failure && end <= bound_s) {
      t = end;
      progress = w.steps;
      break;
    }
    if (bound_s < next_failure) {
      progress = resume + std::clamp<std::int64_t>(std::int64_t((bound_s - t) / w.step_wall_s), 0, w.steps - resume);
      t = bound_s;
      r.bounded = true;
      break;
    }
    double f = next_failure, trained_s = f - t;
    std::int64_t reached = resume + std::int64_t(trained_s / w.step_wall_s);
    // The failure, and each one that ends the recovery after it.
    for (;;) {
      ++r.failures;
      const bool disk = draws.needs_disk(o.memory_recoverable_share) || !memory_tier;
      const std::int64_t checkpoint = w.checkpoints.period > 0 ? w.checkpoints.last_at(reached, resume) : 0;
      const std::int64_t restore =
          disk ? checkpoint : std::max({resume, w.snapshots.last_at(reached, resume), checkpoint});
      r.from_memory += disk ? 0 : 1;
      r.steps_lost += reached - restore;
      // This launch's training past `restore` is lost; a restore before the
      // step it resumed from loses earlier launches' steps too.
      r.cost.lost_work_s += trained_s - double(restore - resume) * w.step_wall_s;
      in_a_row = rules.failures_in_a_row(in_a_row, reached, resume);
      const double backoff_s = rules.backoff_s(in_a_row, o.backoff_base_s);
      const double recover_s = disk ? o.recover_disk_s : o.recover_memory_s;
      const double training_at = f + o.detect_s + backoff_s + recover_s;
      const double next = f + draws.interval_s(mttf_s);
      add_phases(r.cost, std::min(next, training_at) - f, o.detect_s, backoff_s, o.relaunch_s,
                 recover_s - o.relaunch_s);
      resume = restore;
      if (next >= training_at) {
        t = training_at;
        next_failure = next;
        break;
      }
      // The relaunch failed before it trained: a launch without progress.
      f = next;
      trained_s = 0;
      reached = resume;
      if (f >= bound_s) {  // the bound fell inside a recovery
        progress = resume;
        t = bound_s;
        r.bounded = ended = true;
        break;
      }
    }
  }
  r.productive_s = double(progress) * o.step_s;
  r.wall_s = t;
  return r;
}

double resolved_mttf_hours(const ReliabilityOptions& o) {
  return o.mttf_hours > 0 ? o.mttf_hours : published_mttf_hours(o.gpus());
}

EttrEstimate simulate_cadence(const ReliabilityOptions& o, const RelaunchRules& rules, const Cadence& cadence) {
  const Walk w = make_walk(o, cadence);
  const double mttf_s = resolved_mttf_hours(o) * 3600;
  EttrEstimate e;
  e.cadence = cadence;
  e.snapshot_steps = w.snapshots.period;
  e.checkpoint_steps = w.checkpoints.period;
  e.no_failure_ettr = o.step_s / w.step_wall_s;
  std::vector<double> ettr;
  ettr.reserve(std::size_t(o.traces));
  std::int64_t failures = 0, from_memory = 0, steps_lost = 0;
  double productive_s = 0, wall_s = 0;
  FailureCost sum;
  for (int i = 0; i < o.traces; ++i) {
    const TraceResult r = simulate_trace(o, rules, w, mttf_s, i);
    ettr.push_back(r.productive_s / r.wall_s);
    productive_s += r.productive_s;
    wall_s += r.wall_s;
    failures += r.failures;
    from_memory += r.from_memory;
    steps_lost += r.steps_lost;
    e.bounded_traces += r.bounded ? 1 : 0;
    sum.detect_s += r.cost.detect_s;
    sum.backoff_s += r.cost.backoff_s;
    sum.relaunch_s += r.cost.relaunch_s;
    sum.restore_s += r.cost.restore_s;
    sum.lost_work_s += r.cost.lost_work_s;
  }
  // Pooled, as a long run would measure it: the mean of the traces' ratios
  // is higher by the ratio's convexity (a job hit by 2 failures gains more
  // over one hit by 3 than one hit by 4 loses), a point and more with the
  // few failures of a short run.
  e.ettr_mean = productive_s / wall_s;
  std::sort(ettr.begin(), ettr.end());
  const auto quantile = [&](double q) { return ettr[std::size_t(q * double(ettr.size() - 1) + 0.5)]; };
  e.ettr_p10 = quantile(0.1);
  e.ettr_p90 = quantile(0.9);
  e.failures_per_trace = double(failures) / double(o.traces);
  if (failures > 0) {
    const double n = double(failures);
    e.from_memory_share = double(from_memory) / n;
    e.steps_lost_mean = double(steps_lost) / n;
    e.cost = {.detect_s = sum.detect_s / n,
              .backoff_s = sum.backoff_s / n,
              .relaunch_s = sum.relaunch_s / n,
              .restore_s = sum.restore_s / n,
              .lost_work_s = sum.lost_work_s / n};
  }
  return e;
}

void check_rules(const RelaunchRules& rules) {
  HT_CHECK(rules.failures_in_a_row && rules.backoff_s, ErrorKind::kConfig,
           "reliability: htrun's relaunch rules were not given; pass htrun::failures_in_a_row and htrun::backoff_s "
           "(src/tools/htrun/decisions.h, library htrun_core) in RelaunchRules");
}

// Intervals around `centre_s`, in steps: x 2^-4 ... 2^4, at least one step,
// at most kLongestSearchedSteps.
std::vector<std::int64_t> octaves_around(double centre_s, double step_s) {
  std::vector<std::int64_t> v;
  if (!std::isfinite(centre_s)) return v;
  for (int k = -kSearchOctaves; k <= kSearchOctaves; ++k)
    v.push_back(std::clamp<std::int64_t>(std::llround(std::ldexp(centre_s, k) / step_s), 1, kLongestSearchedSteps));
  return v;
}

std::int64_t steps_of(double interval_s, double step_s, std::int64_t otherwise) {
  return std::isfinite(interval_s)
             ? std::clamp<std::int64_t>(std::llround(interval_s / step_s), 1, kLongestSearchedSteps)
             : otherwise;
}

}  // namespace

double published_mttf_hours(std::int64_t gpus) {
  HT_CHECK(gpus >= 1, ErrorKind::kConfig, "reliability: {} GPUs: give at least 1 (--hosts x --gpus-per-host)", gpus);
  const double n = double(gpus);
  const PublishedMttf& first = kPublishedMttf[0];
  const PublishedMttf& last = kPublishedMttf[std::size(kPublishedMttf) - 1];
  // Outside the published sizes, each GPU fails as often as at the nearest.
  if (n <= first.gpus) return first.hours * first.gpus / n;
  if (n >= last.gpus) return last.hours * last.gpus / n;
  std::size_t i = 0;
  while (n > kPublishedMttf[i + 1].gpus) ++i;
  const PublishedMttf& a = kPublishedMttf[i];
  const PublishedMttf& b = kPublishedMttf[i + 1];
  const double f = std::log(n / a.gpus) / std::log(b.gpus / a.gpus);
  return std::exp(std::log(a.hours) + f * (std::log(b.hours) - std::log(a.hours)));
}

double young_daly_interval_s(double cost_s, double mtbf_s) {
  return std::isfinite(mtbf_s) ? std::sqrt(2 * cost_s * mtbf_s) : kInfinity;
}

void validate(const ReliabilityOptions& o) {
  const auto check = [](bool ok, std::string_view what) {
    HT_CHECK(ok, ErrorKind::kConfig, "reliability: {}", what);
  };
  check(o.hosts >= 1, fmt::format("--hosts {}: give at least 1", o.hosts));
  check(o.gpus_per_host >= 1, fmt::format("--gpus-per-host {}: give at least 1", o.gpus_per_host));
  check(o.mttf_hours >= 0, fmt::format("--mttf-hours {}: give the job's mean time to failure in hours (0: Meta's "
                                       "published figures for its GPU count, inf: no failures)",
                                       o.mttf_hours));
  check(o.memory_recoverable_share >= 0 && o.memory_recoverable_share <= 1,
        fmt::format("--memory-recoverable {}: give the share of failures memory recovers, from 0 to 1",
                    o.memory_recoverable_share));
  check(o.step_s > 0 && std::isfinite(o.step_s),
        fmt::format("--step-s {}: give a training step's time in seconds, above 0", o.step_s));
  check(o.cadence.snapshot_every_steps >= -1,
        fmt::format("--snapshot-every-steps {}: give a number of steps (0: no memory snapshots, -1: the engine's auto)",
                    o.cadence.snapshot_every_steps));
  check(o.cadence.checkpoint_every_steps >= 0,
        fmt::format("--checkpoint-every-steps {}: give a number of steps (0: no disk checkpoints)",
                    o.cadence.checkpoint_every_steps));
  check(o.snapshot_stall_s >= 0 && o.checkpoint_stall_s >= 0 && std::isfinite(o.snapshot_stall_s) &&
            std::isfinite(o.checkpoint_stall_s),
        fmt::format("--snapshot-stall-s {} / --checkpoint-stall-s {}: give stalls in seconds, 0 or more",
                    o.snapshot_stall_s, o.checkpoint_stall_s));
  check(o.fault_free_efficiency >= 0 && o.fault_free_efficiency <= 1,
        fmt::format("fault-free efficiency {}: give a measured ETTR without failures, above 0 and at most 1 (0: "
                    "from the stalls)",
                    o.fault_free_efficiency));
  for (const auto& [name, v] : {std::pair{"--detect-s", o.detect_s}, std::pair{"--recover-memory-s", o.recover_memory_s},
                                std::pair{"--recover-disk-s", o.recover_disk_s}, std::pair{"--relaunch-s", o.relaunch_s},
                                std::pair{"--backoff-s", o.backoff_base_s}})
    check(v >= 0 && std::isfinite(v), fmt::format("{} {}: give a time in seconds, 0 or more", name, v));
  check(o.relaunch_s <= std::min(o.recover_memory_s, o.recover_disk_s),
        fmt::format("--relaunch-s {} exceeds the recovery ({} s from memory, {} s from disk): the healthy ranks' "
                    "relaunch is part of each recovery; give at most {}",
                    o.relaunch_s, o.recover_memory_s, o.recover_disk_s, std::min(o.recover_memory_s, o.recover_disk_s)));
  check(o.job_hours > 0 && std::isfinite(o.job_hours),
        fmt::format("--job-hours {}: give the job's training time in hours, above 0", o.job_hours));
  check(o.job_hours * 3600 / o.step_s < 1e15,
        fmt::format("--job-hours {} at --step-s {} is {:.3g} steps: give a shorter job or a longer step", o.job_hours,
                    o.step_s, o.job_hours * 3600 / o.step_s));
  check(o.traces >= 1 && o.traces <= 100000, fmt::format("--traces {}: give 1 to 100000", o.traces));
}

EttrEstimate simulate_ettr(const ReliabilityOptions& o, const RelaunchRules& rules) {
  validate(o);
  check_rules(rules);
  return simulate_cadence(o, rules, o.cadence);
}

double ReliabilityPlan::relaunch_share() const {
  const double total = chosen.cost.total_s();
  return total > 0 ? chosen.cost.relaunch_s / total : 0.0;
}

ReliabilityPlan plan_reliability(const ReliabilityOptions& o, const RelaunchRules& rules) {
  validate(o);
  check_rules(rules);
  ReliabilityPlan plan;
  plan.options = o;
  plan.published_mttf = o.mttf_hours == 0;
  plan.mttf_hours = resolved_mttf_hours(o);
  const double mttf_s = plan.mttf_hours * 3600;
  const bool memory_tier = o.cadence.snapshot_every_steps != 0;
  const double memory_share = memory_tier ? o.memory_recoverable_share : 0.0;
  // Each tier serves its own failures: snapshots those memory recovers,
  // checkpoints the rest (x / 0 is infinite: none needs it).
  plan.young_daly_snapshot_s = memory_tier ? young_daly_interval_s(o.snapshot_stall_s, mttf_s / memory_share) : kInfinity;
  plan.young_daly_checkpoint_s = young_daly_interval_s(o.checkpoint_stall_s, mttf_s / (1 - memory_share));

  // Every cadence simulated once, on the same traces.
  std::map<std::pair<std::int64_t, std::int64_t>, EttrEstimate> done;
  const auto run = [&](const Cadence& c) -> const EttrEstimate& {
    const auto key = std::pair{c.snapshot_every_steps, c.checkpoint_every_steps};
    auto it = done.find(key);
    if (it == done.end()) {
      it = done.emplace(key, simulate_cadence(o, rules, c)).first;
      plan.searched.push_back(it->second);
    }
    return it->second;
  };
  plan.configured = run(o.cadence);
  plan.has_auto = memory_tier;
  if (memory_tier) plan.auto_snapshots = run({.snapshot_every_steps = -1, .checkpoint_every_steps = o.cadence.checkpoint_every_steps});
  plan.young_daly = run(
      {.snapshot_every_steps = memory_tier ? steps_of(plan.young_daly_snapshot_s, o.step_s, o.cadence.snapshot_every_steps) : 0,
       .checkpoint_every_steps = steps_of(plan.young_daly_checkpoint_s, o.step_s, o.cadence.checkpoint_every_steps)});

  // Coordinate search from the best of those three: snapshot intervals at
  // the best checkpoint interval so far, then checkpoint intervals at the
  // best snapshot interval, until a round changes nothing. The two interact
  // (a failure memory recovers resumes from the newer of the snapshot and
  // the checkpoint), so a start far from both optima can stall: from
  // checkpoints every 100 steps, no snapshot interval matters.
  EttrEstimate best = plan.configured;
  const auto consider = [&](const Cadence& c) {
    const EttrEstimate& e = run(c);
    if (e.ettr_mean > best.ettr_mean) best = e;
  };
  if (plan.has_auto) consider(plan.auto_snapshots.cadence);
  consider(plan.young_daly.cadence);
  for (int round = 0; round < kSearchRounds; ++round) {
    const Cadence before = best.cadence;
    if (memory_tier) {
      const std::int64_t every_ckpt = best.cadence.checkpoint_every_steps;
      consider({.snapshot_every_steps = -1, .checkpoint_every_steps = every_ckpt});
      consider({.snapshot_every_steps = o.cadence.snapshot_every_steps, .checkpoint_every_steps = every_ckpt});
      for (std::int64_t k : octaves_around(plan.young_daly_snapshot_s, o.step_s))
        consider({.snapshot_every_steps = k, .checkpoint_every_steps = every_ckpt});
    }
    const std::int64_t every_snap = best.cadence.snapshot_every_steps;
    consider({.snapshot_every_steps = every_snap, .checkpoint_every_steps = o.cadence.checkpoint_every_steps});
    for (std::int64_t k : octaves_around(plan.young_daly_checkpoint_s, o.step_s))
      consider({.snapshot_every_steps = every_snap, .checkpoint_every_steps = k});
    if (best.cadence == before) break;
  }
  // Then half an octave either side of the best fixed intervals.
  for (const double f : {M_SQRT1_2, M_SQRT2}) {
    const Cadence c = best.cadence;
    if (c.snapshot_every_steps > 0)
      consider({.snapshot_every_steps = std::max<std::int64_t>(1, std::llround(double(c.snapshot_every_steps) * f)),
                .checkpoint_every_steps = c.checkpoint_every_steps});
    if (c.checkpoint_every_steps > 0)
      consider({.snapshot_every_steps = best.cadence.snapshot_every_steps,
                .checkpoint_every_steps = std::max<std::int64_t>(1, std::llround(double(c.checkpoint_every_steps) * f))});
  }
  plan.chosen = best;

  ReliabilityOptions kept = o;
  kept.recover_memory_s -= o.relaunch_s;
  kept.recover_disk_s -= o.relaunch_s;
  kept.relaunch_s = 0;
  plan.keeping_healthy_ranks = simulate_cadence(kept, rules, best.cadence);
  return plan;
}

}  // namespace ht::plan
