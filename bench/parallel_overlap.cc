// ht-parallel-bench --mode overlap: the share of DDP's gradient all-reduce
// hidden behind backward.
//
// DDP (ZeRO 0) with small buckets. After each step the same buckets
// (parallel::assign_buckets, the rule DataParallel runs) are all-reduced
// again on the dp group with nothing else running: "serial" is that time,
// the reduction time the step would have waited for without overlap.
// "exposed" is DataParallel::reduction_times().exposed_ms, what
// finish_gradients() did wait, on the rank that waited least: the rank whose
// backward ends last waits only for the communication left, the others also
// for it (skew between ranks, not communication; shown as "max wait").
// hidden share = 1 - exposed / serial (serial: maximum over ranks) per step;
// the median over timed steps is the figure. A second engine with one bucket
// (its reduction starts when backward ends) runs alternately, so backward and
// step times with and without overlap are side by side: the hidden share
// counts the wait, not the CPU the communication thread takes from backward.
// Target: 70 %, reported, never enforced.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "parallel_common.h"
#include "ht/core/memory.h"
#include "ht/parallel/tables.h"

namespace ht::bench {
namespace {

using nlohmann::json;

constexpr double kHiddenTarget = 0.70;

/// The element counts of DDP's buckets for `model`: DataParallel's groups
/// (parallel::assign_buckets over the parameters' counts, f32 gradients),
/// each group's counts summed. No parameter is isolated: one stage (pp = 1)
/// holds no weight tied across stages.
std::vector<std::int64_t> ddp_bucket_numels(nn::Model& model, std::int64_t bucket_bytes) {
  std::vector<std::int64_t> numels;
  for (const nn::Parameter* p : model.parameters()) numels.push_back(shape_numel(p->shape()));
  std::vector<std::int64_t> buckets;
  for (const parallel::ParamGroup& g : parallel::assign_buckets(numels, std::int64_t(sizeof(float)), bucket_bytes)) {
    std::int64_t numel = 0;
    for (int i : g.params) numel += numels[std::size_t(i)];
    buckets.push_back(numel);
  }
  return buckets;
}

/// Milliseconds to all-reduce (avg, f32, in place) every bucket of `flat`
/// back to back on `dp`, all enqueued at once as DDP does, after a barrier.
double time_serial(comm::Communicator& dp, Tensor& flat, const std::vector<std::int64_t>& buckets) {
  dp.barrier()->wait();
  const double t0 = now_ms();
  std::vector<comm::WorkPtr> works;
  std::int64_t at = 0;
  std::vector<Tensor> views;
  for (std::int64_t n : buckets) {
    views.push_back(flat.slice(at, at + n));
    at += n;
  }
  for (Tensor& v : views) works.push_back(dp.all_reduce(v, v, comm::ReduceOp::kAvg));
  for (auto& w : works) w->wait();
  return now_ms() - t0;
}

/// One step's figures, in ms (maxima over ranks, exposed waits minima).
struct Step {
  double backward_ms, exposed_ms, max_wait_ms, serial_ms, single_ms, step_ms, one_backward_ms, one_exposed_ms,
      one_step_ms, hidden;
};

/// The medians of the timed steps.
struct OverlapRun {
  std::vector<Step> steps;
  std::size_t buckets = 0;
  std::int64_t grad_bytes = 0;
  double med(double Step::*field) const {
    std::vector<double> v;
    for (const Step& st : steps) v.push_back(st.*field);
    return median(v);
  }
};

/// The engines and buffers of the mode, and one measured step of them.
class OverlapBench {
 public:
  OverlapBench(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model)
      : mesh_(mesh), splits_(splits_for(a, model, mesh.shape().dp_size())) {
    train::EngineOptions o = base_options(a);
    o.layout.zero = 0;
    o.bucket_bytes = a.bucket_bytes;
    engine_ = std::make_unique<LmEngine>(o, model, splits_, a.seq, &mesh);
    if (a.one_bucket) {
      o.bucket_bytes = std::int64_t(1) << 62;
      single_ = std::make_unique<LmEngine>(o, model, splits_, a.seq, &mesh);
    }
    buckets_ = ddp_bucket_numels((*engine_)->model(), a.bucket_bytes);
    std::int64_t total_numel = 0;
    for (std::int64_t n : buckets_) total_numel += n;
    flat_ = Tensor::zeros({total_numel}, DType::kF32, Device::cpu(), MemCategory::kOther);
    one_bucket_ = {total_numel};
  }
  std::size_t buckets() const { return buckets_.size(); }
  std::int64_t grad_bytes() const { return flat_.numel() * std::int64_t(sizeof(float)); }

  /// One step of each engine, the serial reductions after it, gathered.
  Step step();

 private:
  comm::DeviceMesh& mesh_;
  data::TokenSplits splits_;
  std::unique_ptr<LmEngine> engine_, single_;
  std::vector<std::int64_t> buckets_, one_bucket_;
  Tensor flat_;
};

Step OverlapBench::step() {
  const train::StepStats s = (*engine_)->step();
  const parallel::ReductionTimes t = (*engine_)->data_parallel().reduction_times();
  const double serial_ms = time_serial(mesh_.dp_group(), flat_, buckets_);
  const double single_ms = time_serial(mesh_.dp_group(), flat_, one_bucket_);
  double one_backward_ms = 0, one_exposed_ms = 0, one_step_ms = 0;
  if (single_) {
    one_step_ms = (*single_)->step().ms;
    one_backward_ms = (*single_)->data_parallel().reduction_times().backward_ms;
    one_exposed_ms = (*single_)->data_parallel().reduction_times().exposed_ms;
  }
  constexpr std::size_t n = 8;
  const std::vector<double> all = gather_f64(
      mesh_.world(), {t.backward_ms, t.exposed_ms, serial_ms, single_ms, s.ms, one_exposed_ms, one_step_ms,
                      one_backward_ms});
  const int ranks = mesh_.world().size();
  auto max_of = [&](std::size_t i) {
    double m = all[i];
    for (int r = 1; r < ranks; ++r) m = std::max(m, all[std::size_t(r) * n + i]);
    return m;
  };
  auto min_of = [&](std::size_t i) {
    double m = all[i];
    for (int r = 1; r < ranks; ++r) m = std::min(m, all[std::size_t(r) * n + i]);
    return m;
  };
  Step st{};
  st.backward_ms = max_of(0);
  st.exposed_ms = min_of(1);
  st.max_wait_ms = max_of(1);
  st.serial_ms = max_of(2);
  st.single_ms = max_of(3);
  st.step_ms = max_of(4);
  st.one_exposed_ms = min_of(5);
  st.one_step_ms = max_of(6);
  st.one_backward_ms = max_of(7);
  st.hidden = st.serial_ms > 0 ? 1.0 - st.exposed_ms / st.serial_ms : 0.0;
  return st;
}

void print_table(const ParallelArgs& a, const models::GPTConfig& model, int dp, const OverlapRun& run) {
  const double hidden = run.med(&Step::hidden);
  std::printf("# overlap: %s, batch %lld x %lld, dp %d, DDP buckets of >= %lld bytes: %zu buckets, %.1f MiB of "
              "gradients\n",
              model.str().c_str(), (long long)a.micro_batch, (long long)a.seq, dp, (long long)a.bucket_bytes,
              run.buckets, run.grad_bytes / kMiB);
  std::printf("# ms; exposed = finish_gradients()' wait on the rank that waited least, max wait = on the rank\n"
              "# that waited most (skew between ranks included); serial = the same buckets all-reduced after the\n"
              "# step with nothing else running, single = one all_reduce of all the gradients (maxima over\n"
              "# ranks); 1-bkt = a second trainer with one bucket, which starts when backward ends; backward =\n"
              "# from the last micro-batch's backward to finish_gradients() (maxima over ranks)\n");
  std::printf("#%5s %9s %9s %9s %9s %9s %8s %9s | %9s %9s %9s\n", "step", "backward", "exposed", "max wait", "serial",
              "single", "hidden", "step", "1-bkt bwd", "1-bkt exp", "1-bkt stp");
  const char* row = " %5s %9.1f %9.1f %9.1f %9.1f %9.1f %7.1f%% %9.1f | %9.1f %9.1f %9.1f\n";
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    const Step& st = run.steps[i];
    std::printf(row, std::to_string(i + 1).c_str(), st.backward_ms, st.exposed_ms, st.max_wait_ms, st.serial_ms,
                st.single_ms, 100 * st.hidden, st.step_ms, st.one_backward_ms, st.one_exposed_ms, st.one_step_ms);
  }
  std::printf(row, "med", run.med(&Step::backward_ms), run.med(&Step::exposed_ms), run.med(&Step::max_wait_ms),
              run.med(&Step::serial_ms), run.med(&Step::single_ms), 100 * hidden, run.med(&Step::step_ms),
              run.med(&Step::one_backward_ms), run.med(&Step::one_exposed_ms), run.med(&Step::one_step_ms));
  std::printf("# hidden share (median over %zu steps): %.1f %%, target >= %.0f %%: %s\n", run.steps.size(),
              100 * hidden, 100 * kHiddenTarget, hidden >= kHiddenTarget ? "met" : "not met");
}

void print_json(const ParallelArgs& a, const models::GPTConfig& model, int dp, const OverlapRun& run) {
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    const Step& st = run.steps[i];
    print_json_line({{"type", "overlap_step"},
                     {"step", i + 1},
                     {"backward_ms", st.backward_ms},
                     {"exposed_ms", st.exposed_ms},
                     {"max_wait_ms", st.max_wait_ms},
                     {"serial_ms", st.serial_ms},
                     {"single_ms", st.single_ms},
                     {"hidden_share", st.hidden},
                     {"step_ms", st.step_ms},
                     {"one_bucket_backward_ms", st.one_backward_ms},
                     {"one_bucket_exposed_ms", st.one_exposed_ms},
                     {"one_bucket_step_ms", st.one_step_ms}});
  }
  const double hidden = run.med(&Step::hidden);
  print_json_line({{"type", "overlap_summary"},
                   {"model", model.str()},
                   {"dp", dp},
                   {"bucket_bytes", a.bucket_bytes},
                   {"buckets", run.buckets},
                   {"grad_bytes", run.grad_bytes},
                   {"steps", run.steps.size()},
                   {"backward_ms", run.med(&Step::backward_ms)},
                   {"exposed_ms", run.med(&Step::exposed_ms)},
                   {"max_wait_ms", run.med(&Step::max_wait_ms)},
                   {"serial_ms", run.med(&Step::serial_ms)},
                   {"single_ms", run.med(&Step::single_ms)},
                   {"step_ms", run.med(&Step::step_ms)},
                   {"one_bucket_backward_ms", run.med(&Step::one_backward_ms)},
                   {"one_bucket_exposed_ms", run.med(&Step::one_exposed_ms)},
                   {"one_bucket_step_ms", run.med(&Step::one_step_ms)},
                   {"hidden_share", hidden},
                   {"target_hidden_share", kHiddenTarget},
                   {"met", hidden >= kHiddenTarget}});
}

}  // namespace

int run_overlap(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model) {
  const bool print = mesh.world().rank() == 0;
  OverlapBench bench(a, mesh, model);
  OverlapRun run;
  run.buckets = bench.buckets();
  run.grad_bytes = bench.grad_bytes();
  for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
    const Step st = bench.step();
    const bool timed = i >= a.warmup;
    if (print)
      std::fprintf(stderr, "# overlap %s %lld: step %.0f ms, exposed %.1f ms of %.1f ms serial (hidden %.1f %%)\n",
                   timed ? "step" : "warm-up", (long long)(timed ? i - a.warmup + 1 : i + 1), st.step_ms,
                   st.exposed_ms, st.serial_ms, 100 * st.hidden);
    if (timed) run.steps.push_back(st);
  }
  const int dp = mesh.shape().dp_size();
  if (print && !a.json) print_table(a, model, dp, run);
  if (print && a.json) print_json(a, model, dp, run);
  return 0;
}

}  // namespace ht::bench
