// ht-collectives-bench --overlap (MPI backend): how much a compute loop
// (sgemm through ht::ops::matmul, or a plain arithmetic loop) slows down
// while all-reduces of --overlap-bytes are kept in flight, against the same
// loop alone, and the CPU time the rank's other threads (the communication
// thread, MPI's own) take meanwhile.
#include <ctime>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "collectives_common.h"
#include "ht/ops/matmul.h"

namespace ht::bench::collectives {
namespace {

using Clock = std::chrono::steady_clock;

/// Compute loop for --overlap: one step of sgemm (m x m x m) or of a plain
/// arithmetic loop over an L1-resident array.
struct Compute {
  std::string kind;
  Tensor a, b, c;
  std::vector<float> v;
  explicit Compute(const std::string& k, int m) : kind(k) {
    if (kind == "sgemm") {
      a = Tensor::empty({m, m}, DType::kF32);
      b = Tensor::empty({m, m}, DType::kF32);
      c = Tensor::zeros({m, m}, DType::kF32);
      a.fill_(0.5f);
      b.fill_(0.25f);
    } else if (kind == "loop") {
      v.assign(4096, 1.0f);
    } else {
      throw UsageError("--overlap-compute must be sgemm or loop");
    }
  }
  void step() {
    if (kind == "sgemm") {
      ops::matmul(a, b, c);
      return;
    }
    for (int rep = 0; rep < 64; ++rep)
      for (auto& x : v) x = x * 0.999f + 0.001f;
  }
};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// What one --overlap run measured (seconds; maxima over ranks).
struct OverlapResult {
  long steps = 0;               // compute steps of each loop
  double comm_alone = 0;        // one all-reduce alone
  double alone1 = 0, alone2 = 0;  // the compute loop alone, before and after
  double with = 0;              // the compute loop with all-reduces in flight
  double others_share = 0;      // CPU of the rank's other threads over `with`
  long min_completed = 1;       // all-reduces completed during it (least of any rank)
  double alone() const { return 0.5 * (alone1 + alone2); }
  double loss() const { return 1.0 - alone() / with; }  // fraction of compute speed lost
  double comm_during() const { return with / double(min_completed); }
};

/// Compute steps for about --overlap-seconds, the same on every rank.
long calibrate(Compute& comp, MPI_Comm world, double seconds) {
  int calib = 0;
  const auto c0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - c0).count() < 0.2) {
    comp.step();
    ++calib;
  }
  double per_step = std::chrono::duration<double>(Clock::now() - c0).count() / calib;
  MPI_Allreduce(MPI_IN_PLACE, &per_step, 1, MPI_DOUBLE, MPI_MAX, world);
  return std::max(10L, long(seconds / per_step));
}

double compute_alone(Compute& comp, MPI_Comm world, long steps) {
  MPI_Barrier(world);
  const auto t0 = Clock::now();
  for (long i = 0; i < steps; ++i) comp.step();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, world);
  return s;
}

/// The compute loop with an all-reduce always in flight: re-issued as soon
/// as the previous one completes (polled between compute steps). Fills
/// r.with, r.others_share and r.min_completed.
void compute_with_all_reduce(Communicator& c, MPI_Comm world, const Options& o, Compute& comp, Tensor& in,
                             Tensor& out, OverlapResult& r) {
  MPI_Barrier(world);
  long completed = 0;
  const double process_cpu0 = process_cpu_seconds(), caller_cpu0 = thread_cpu_seconds();
  WorkPtr w = issue(c, Op::kAllReduce, in, out, o.redop, 0);
  const auto t0 = Clock::now();
  for (long i = 0; i < r.steps; ++i) {
    comp.step();
    if (w->test()) {
      ++completed;
      w = issue(c, Op::kAllReduce, in, out, o.redop, 0);
    }
  }
  r.with = std::chrono::duration<double>(Clock::now() - t0).count();
  // CPU time of this process's other threads (the communication thread, and
  // MPI's own) while the loop ran, as a share of the loop's wall time.
  const double others_cpu = (process_cpu_seconds() - process_cpu0) - (thread_cpu_seconds() - caller_cpu0);
  r.others_share = others_cpu / r.with;
  MPI_Allreduce(MPI_IN_PLACE, &r.others_share, 1, MPI_DOUBLE, MPI_MAX, world);
  // Ranks may have issued different numbers of all-reduces: agree on the
  // largest (before waiting, which needs the peers' matching calls) and catch up.
  long issued = completed + 1, most = issued;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_LONG, MPI_MAX, world);
  std::vector<WorkPtr> pending{w};
  for (long k = issued; k < most; ++k) pending.push_back(issue(c, Op::kAllReduce, in, out, o.redop, 0));
  for (auto& p : pending) p->wait();
  MPI_Allreduce(MPI_IN_PLACE, &r.with, 1, MPI_DOUBLE, MPI_MAX, world);
  r.min_completed = std::max(completed, 1L);
  MPI_Allreduce(MPI_IN_PLACE, &r.min_completed, 1, MPI_LONG, MPI_MIN, world);
}

void print_overlap(const Options& o, const OverlapResult& r) {
  if (o.json) {
    print_json_line({{"type", "overlap"}, {"compute", o.overlap_compute}, {"m", o.overlap_m},
                     {"steps", r.steps}, {"all_reduce_bytes", o.overlap_bytes},
                     {"compute_alone_ms", r.alone() * 1e3}, {"compute_alone_first_ms", r.alone1 * 1e3},
                     {"compute_alone_second_ms", r.alone2 * 1e3}, {"compute_with_comm_ms", r.with * 1e3},
                     {"compute_speed_lost_pct", r.loss() * 100}, {"all_reduces_completed", r.min_completed},
                     {"all_reduce_alone_ms", r.comm_alone * 1e3},
                     {"all_reduce_during_compute_ms", r.comm_during() * 1e3},
                     {"communication_cpu_share", r.others_share}});
    return;
  }
  std::printf("# overlap: compute %s%s, %ld steps; all_reduce of %lld bytes (%s) kept in flight\n",
              o.overlap_compute.c_str(),
              o.overlap_compute == "sgemm" ? (" " + std::to_string(o.overlap_m) + "^3").c_str() : "", r.steps,
              (long long)o.overlap_bytes, type_name(o.dtype));
  std::printf("#   compute alone          : %9.1f ms  (%.1f before, %.1f after)\n", r.alone() * 1e3, r.alone1 * 1e3,
              r.alone2 * 1e3);
  std::printf("#   compute with all_reduce: %9.1f ms  (%ld all_reduces completed)\n", r.with * 1e3, r.min_completed);
  std::printf("#   compute speed lost     : %9.1f %%  (target <= 15 %%)\n", r.loss() * 100);
  std::printf("#   all_reduce alone       : %9.2f ms; during compute about %.2f ms each\n", r.comm_alone * 1e3,
              r.comm_during() * 1e3);
  std::printf("#   communication CPU      : %9.1f %% of a core during the loop (most of any rank)\n",
              r.others_share * 100);
}

}  // namespace

int run_overlap(Communicator& c, MPI_Comm world, const Options& o, bool print) {
  const std::int64_t count = o.overlap_bytes / std::int64_t(dtype_size(o.dtype));
  Tensor in = Tensor::zeros({count}, o.dtype), out = Tensor::zeros({count}, o.dtype);
  fill(in, [&](std::int64_t i) { return pattern(c.rank(), i); });
  Compute comp(o.overlap_compute, o.overlap_m);
  OverlapResult r;
  r.steps = calibrate(comp, world, o.overlap_seconds);
  // Communication alone: all-reduces back to back.
  issue(c, Op::kAllReduce, in, out, o.redop, 0)->wait();
  r.comm_alone = time_loop(world, 1, std::max(3, o.iters / 4), [&] {
    issue(c, Op::kAllReduce, in, out, o.redop, 0)->wait();
  });
  r.alone1 = compute_alone(comp, world, r.steps);
  compute_with_all_reduce(c, world, o, comp, in, out, r);
  r.alone2 = compute_alone(comp, world, r.steps);
  if (print) {
    print_overlap(o, r);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace ht::bench::collectives
