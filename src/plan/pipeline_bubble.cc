// ht::plan::pipeline_bubble: the idle share of a pipeline, from the schedule
// simulator the executor's tables are checked by.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "ht/core/error.h"
#include "ht/plan/time_model.h"

namespace ht::plan {
namespace {

/// Ticks of one micro-batch's forward and backward on a stage: fine enough
/// that the simulator's one tick per transfer weighs little (a pipeline's
/// transfers are in the stages' own times already).
constexpr double kTicksPerMicroBatch = 64;
/// The grid of the forward's and the weight gradients' shares of a micro-batch.
constexpr double kShareSteps = 8;

/// Ticks the simulator takes for m micro-batches. Beyond a few times p the
/// schedules are in their steady state, each further micro-batch adding the
/// same ticks: two runs there extrapolate any m, so a search over thousands
/// of accumulation counts simulates a handful of tables.
double simulated_ticks(parallel::Schedule schedule, int p, int m, int v, const parallel::SimCosts& costs) {
  using Key = std::tuple<int, int, int, int, int, int, int, int>;
  thread_local std::map<Key, double> cache;
  const auto run = [&](int micro_batches) {
    const Key key{int(schedule), p, micro_batches, v, costs.forward_ticks, costs.backward_ticks,
                  costs.backward_input_ticks, costs.backward_weight_ticks};
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
    std::vector<std::vector<parallel::Action>> tables;
    for (int s = 0; s < p; ++s) tables.push_back(parallel::stage_actions(schedule, s, p, micro_batches, v));
    const parallel::SimResult r = parallel::simulate(tables, costs);
    HT_CHECK(r.completed, ErrorKind::kInternal, "pipeline_bubble: the {} table of {} stages and {} micro-batches does "
             "not complete in the simulator: {}", parallel::schedule_name(schedule), p, micro_batches, r.problem);
    return cache[key] = double(r.ticks);
  };
  const int steady = 3 * p;  // a multiple of p, as the interleaved schedule needs
  if (m <= steady) return run(m);
  const double at = run(steady), before = run(steady - p);
  return at + (at - before) / double(p) * double(m - steady);
}

}  // namespace

double pipeline_bubble(parallel::Schedule schedule, int p, int m, int v, double forward_ms, double backward_ms,
                       double weight_ms) {
  if (p <= 1 || m <= 0 || forward_ms + backward_ms <= 0) return 0.0;
  // The shares of the work, on a grid of 1/kShareSteps: the bubble depends
  // on them only, and a search meets a handful of grid points instead of a
  // new simulation for every layout's slightly different times.
  const double total = forward_ms + backward_ms;
  const auto on_grid = [](double share) { return std::round(std::clamp(share, 0.0, 1.0) * kShareSteps) / kShareSteps; };
  const double forward_share = on_grid(forward_ms / total);
  // Only ZB-H1 runs the weight gradients apart; the others' tables fuse them.
  const double weight_share = schedule == parallel::Schedule::kZeroBubbleH1
                                  ? on_grid(std::clamp(weight_ms, 0.0, backward_ms) / total)
                                  : 0.0;
  // Each action's ticks: a chunk's share of the stage's, at least one.
  const auto ticks = [&](double share) {
    return std::max(1, int(std::lround(share * kTicksPerMicroBatch / double(v))));
  };
  parallel::SimCosts costs;
  costs.forward_ticks = ticks(forward_share);
  costs.backward_ticks = std::max(2, ticks(1.0 - forward_share));  // the fused backward
  costs.backward_weight_ticks = std::clamp(ticks(weight_share), 1, costs.backward_ticks - 1);
  costs.backward_input_ticks = costs.backward_ticks - costs.backward_weight_ticks;
  const double busy = double(m) * double(v) * double(costs.forward_ticks + costs.backward_ticks);
  return std::clamp(1.0 - busy / simulated_ticks(schedule, p, m, v, costs), 0.0, 1.0);
}

}  // namespace ht::plan
