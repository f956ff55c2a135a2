// ht-parallel-bench --mode bubble: the pipeline bubble of GPipe, 1F1B,
// interleaved 1F1B and ZB-H1, and the activations each holds.
//
// For each schedule and micro-batch count m, an Engine with grad_accum = m on
// pp stages; per stage, from Engine::pipeline().stats() summed over the timed
// steps, idle share = idle / (idle + compute) next to the theory
// (p - 1) / (m + p - 1) and to 1 - compute / span (span: the longest idle +
// compute of any stage; PipelineStats counts only time inside train_step, so
// a stage that finishes early does not see the idle time after its last
// backward), and the peak activation bytes saved by micro-batches in flight.
// The theories, as idle shares of a stage's step (T: one micro-batch's
// forward and backward on one stage):
//   gpipe, 1f1b   (p - 1) / (m + p - 1)
//   interleaved   (p - 1) / (v m + p - 1): the bubble is (p - 1) T / v
//   zb-h1         (p - 1) / (3 m + p - 1): the zero-bubble paper's value for
//                 forward, B and W of equal cost (bubble (p - 1) T / 3); B
//                 costs more than W here, which makes the real one larger.
// 1F1B holds min(m, p - s) micro-batches on stage s, GPipe m, so 1F1B's peak
// must be below GPipe's where m > p - s and equal elsewhere; the exit status
// is 1 otherwise. ZB-H1 holds as many micro-batches as 1F1B, each longer
// (from F to W), plus the output gradients its deferred GEMMs read.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "parallel_common.h"

namespace ht::bench {
namespace {

using nlohmann::json;

struct BubbleRow {
  std::string schedule;
  int m = 0, stage = 0;
  double compute_ms = 0, idle_ms = 0, step_ms = 0;
  std::int64_t peak_saved_bytes = 0;
  double span_ms = 0;  // the longest compute + idle of any stage: the pipeline's wall time
  double idle_share() const { return idle_ms + compute_ms > 0 ? idle_ms / (idle_ms + compute_ms) : 0.0; }
  double span_idle_share() const { return span_ms > 0 ? 1.0 - compute_ms / span_ms : 0.0; }
};

/// One engine with `schedule` and m micro-batches a step: its rows, one per
/// stage (that stage's dp 0, tp 0 rank), added to `rows`.
void measure_bubble(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model,
                    const std::string& schedule, int m, std::vector<BubbleRow>& rows) {
  comm::Communicator& world = mesh.world();
  const bool print = world.rank() == 0;
  train::EngineOptions o = base_options(a);
  o.layout.schedule = parallel::parse_schedule(schedule);
  if (o.layout.schedule == parallel::Schedule::kInterleaved) o.layout.virtual_stages = a.virtual_stages;
  o.layout.grad_accum = m;
  const data::TokenSplits splits = splits_for(a, model, mesh.shape().dp_size());
  LmEngine engine(o, model, splits, a.seq, &mesh);
  double compute_ms = 0, idle_ms = 0;
  std::int64_t peak = 0;
  std::vector<double> step_ms;
  for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
    const train::StepStats s = engine->step();
    const parallel::PipelineStats& ps = engine->pipeline().stats();
    const bool timed = i >= a.warmup;
    if (timed) {
      compute_ms += ps.compute_ms;
      idle_ms += ps.idle_ms;
      step_ms.push_back(s.ms);
    }
    peak = std::max(peak, ps.peak_saved_bytes);
    if (print)
      std::fprintf(stderr, "# bubble %s m %d %s %lld: %.0f ms (stage 0: compute %.0f ms, idle %.0f ms)\n",
                   schedule.c_str(), m, timed ? "step" : "warm-up", (long long)(timed ? i - a.warmup + 1 : i + 1),
                   s.ms, ps.compute_ms, ps.idle_ms);
  }
  const comm::MeshCoord& at = mesh.coord();
  const std::vector<double> all =
      gather_f64(world, {double(at.pp_rank), double(at.dp_rank), double(at.tp_rank), compute_ms, idle_ms,
                         double(peak), median(step_ms)});
  // The span is the longest stage; one row per stage: its dp 0, tp 0 rank.
  double span_ms = 0;
  for (int r = 0; r < world.size(); ++r)
    span_ms = std::max(span_ms, all[std::size_t(r) * 7 + 3] + all[std::size_t(r) * 7 + 4]);
  for (int r = 0; r < world.size(); ++r) {
    const double* v = &all[std::size_t(r) * 7];
    if (v[1] != 0 || v[2] != 0) continue;
    rows.push_back({schedule, m, int(v[0]), v[3], v[4], v[6], std::int64_t(v[5]), span_ms});
  }
}

/// 1F1B against GPipe, stage by stage: below where m > p - s, never above.
/// Returns whether that holds; `notes` gets each row where it does not.
bool check_saved(const std::vector<BubbleRow>& rows, int p, std::vector<std::string>& notes) {
  bool ok = true;
  for (const BubbleRow& f : rows) {
    if (f.schedule != "1f1b") continue;
    for (const BubbleRow& g : rows) {
      if (g.schedule != "gpipe" || g.m != f.m || g.stage != f.stage) continue;
      const bool must_be_below = f.m > p - f.stage;
      const bool row_ok =
          must_be_below ? f.peak_saved_bytes < g.peak_saved_bytes : f.peak_saved_bytes <= g.peak_saved_bytes;
      if (!row_ok) {
        ok = false;
        notes.push_back(fmt::format("m {} stage {}: 1f1b {} bytes, gpipe {}", f.m, f.stage, f.peak_saved_bytes,
                                    g.peak_saved_bytes));
      }
    }
  }
  return ok;
}

double theory(const std::string& schedule, int p, int m, int v) {
  const double units = schedule == "interleaved" ? double(v) * m : schedule == "zb-h1" ? 3.0 * m : double(m);
  return double(p - 1) / (units + double(p - 1));
}

void print_table(const ParallelArgs& a, const models::GPTConfig& model, int p, int dp,
                 const std::vector<BubbleRow>& rows, bool saved_ok, const std::vector<std::string>& notes) {
  std::printf("# bubble: %s, micro-batch %lld x %lld, pp %d, dp %d, %lld timed step(s) after %lld warm-up\n",
              model.str().c_str(), (long long)a.micro_batch, (long long)a.seq, p, dp, (long long)a.steps,
              (long long)a.warmup);
  std::printf("# ms summed over the timed steps; idle%% = idle / (idle + compute) (PipelineStats: the stage's own\n"
              "# time inside train_step); span%% = 1 - compute / span, span = the longest compute + idle of any\n"
              "# stage; theory = (p-1)/(u+p-1), u = m (gpipe, 1f1b), v m (interleaved, v = %d), 3 m (zb-h1,\n"
              "# equal F, B, W); saved = peak activation bytes held by micro-batches in flight; step = median step ms\n",
              a.virtual_stages);
  std::printf("#%4s %6s %11s %10s %10s %8s %8s %8s %12s %10s %9s\n", "m", "stage", "schedule", "compute", "idle",
              "idle%", "span%", "theory%", "ms/micro-b.", "saved MiB", "step ms");
  for (const BubbleRow& r : rows)
    std::printf(" %4d %6d %11s %10.1f %10.1f %7.1f%% %7.1f%% %7.1f%% %12.1f %10.2f %9.1f\n", r.m, r.stage,
                r.schedule.c_str(), r.compute_ms, r.idle_ms, 100 * r.idle_share(), 100 * r.span_idle_share(),
                100 * theory(r.schedule, p, r.m, a.virtual_stages), r.compute_ms / double(r.m * a.steps), r.peak_saved_bytes / kMiB, r.step_ms);
  std::printf("# 1F1B peak saved bytes below GPipe's wherever m > p - stage (equal elsewhere): %s\n",
              saved_ok ? "yes" : "NO");
  for (const std::string& n : notes) std::printf("#   %s\n", n.c_str());
}

void print_json(const ParallelArgs& a, const models::GPTConfig& model, int p, const std::vector<BubbleRow>& rows,
                bool saved_ok) {
  for (const BubbleRow& r : rows)
    print_json_line({{"type", "bubble"},
                     {"pp", p},
                     {"schedule", r.schedule},
                     {"micro_batches", r.m},
                     {"stage", r.stage},
                     {"compute_ms", r.compute_ms},
                     {"idle_ms", r.idle_ms},
                     {"idle_share", r.idle_share()},
                     {"span_ms", r.span_ms},
                     {"span_idle_share", r.span_idle_share()},
                     {"theory_idle_share", theory(r.schedule, p, r.m, a.virtual_stages)},
                     {"peak_saved_bytes", r.peak_saved_bytes},
                     {"step_ms", r.step_ms}});
  print_json_line({{"type", "bubble_summary"},
                   {"model", model.str()},
                   {"pp", p},
                   {"virtual_stages", a.virtual_stages},
                   {"steps", a.steps},
                   {"saved_1f1b_below_gpipe", saved_ok}});
}

}  // namespace

int run_bubble(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model) {
  const bool print = mesh.world().rank() == 0;
  const int p = mesh.shape().pp_size();
  std::vector<BubbleRow> rows;
  for (const std::string& schedule : a.schedules)
    for (int m : a.micro_batches) measure_bubble(a, mesh, model, schedule, m, rows);
  std::sort(rows.begin(), rows.end(), [](const BubbleRow& x, const BubbleRow& y) {
    return std::tie(x.m, x.stage, x.schedule) < std::tie(y.m, y.stage, y.schedule);
  });
  std::vector<std::string> notes;
  const bool saved_ok = check_saved(rows, p, notes);
  if (print && !a.json) print_table(a, model, p, mesh.shape().dp_size(), rows, saved_ok, notes);
  if (print && a.json) print_json(a, model, p, rows, saved_ok);
  return saved_ok ? 0 : 1;
}

}  // namespace ht::bench
