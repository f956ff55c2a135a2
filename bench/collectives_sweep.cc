// ht-collectives-bench's table, as nccl-tests prints it: per size,
// out-of-place then in-place; each times `-n` iterations of enqueue + wait
// after `-w` warm-up iterations and a barrier, and reports the average time
// per iteration, maximum over ranks. algbw = size / time; busbw = algbw x the
// nccl-tests factor (bus_factor). With -c 1 each size and placement is then
// run once more on inputs whose results are exact in every dtype and the
// wrong elements are counted (#wrong, summed over ranks).
//
// --compare-raw (MPI backend): the same sizes through raw MPI on the same
// buffers (collectives_raw_mpi.h); ours and raw alternate `--rounds` times
// per size and placement and the fastest round of each is kept; a second
// table gives ours/raw.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "collectives_common.h"
#include "collectives_raw_mpi.h"

namespace ht::bench::collectives {
namespace {

struct Result {
  double sec = NAN;
  std::int64_t wrong = 0;
  bool valid = false;
};

/// One size: ours per placement (0 out of place, 1 in place) and, with
/// --compare-raw, raw MPI's blocking and nonblocking forms.
struct SizeRow {
  Shape s;
  Result ours[2], blocking[2], nonblocking[2];
};

/// What the sweep prints beside each row.
struct Columns {
  double factor = 1;      // busbw / algbw
  std::string redop;      // "none" for an operation without one
  int root = -1;          // -1 for an operation without one
};

double algbw_gbps(std::int64_t bytes, double sec) { return sec > 0 ? double(bytes) / 1e9 / sec : 0; }

nlohmann::json result_json(const Result& r, std::int64_t bytes, double factor) {
  if (!r.valid) return nullptr;
  const double a = algbw_gbps(bytes, r.sec);
  return {{"time_us", r.sec * 1e6}, {"algbw_gbps", a}, {"busbw_gbps", a * factor}, {"wrong", r.wrong}};
}

void print_table_header() {
  std::printf("#\n");
  std::printf("#%48s %31s %31s\n", "", "out-of-place         ", "in-place         ");
  std::printf("#%11s %12s %9s %6s %5s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %12s %9s %6s %5s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

/// Times one placement of one size (ours alone, or alternating with raw MPI
/// into row.blocking/nonblocking), then checks it with -c 1.
Result measure_placement(Communicator& c, MPI_Comm world, const Options& o, Buffers& buf, bool ip, RawMpi* raw,
                         SizeRow& row) {
  Result res;
  Tensor& in = ip ? buf.ip_in : buf.in;
  Tensor& out = ip ? buf.ip_out : buf.out;
  auto ours = [&] { issue(c, o.op, in, out, o.redop, o.root)->wait(); };
  if (!raw) {
    res.sec = time_loop(world, o.warmup, o.iters, ours);
  } else {
    // Alternate ours and raw; keep the fastest round of each.
    Tensor& raw_in = ip ? buf.ip_buf : buf.in;
    Tensor& raw_out = ip ? buf.ip_buf : buf.out;
    const bool nb = raw_has_nonblocking(o.op);
    double best = INFINITY, best_b = INFINITY, best_nb = INFINITY;
    for (int round = 0; round < o.rounds; ++round) {
      best = std::min(best, time_loop(world, o.warmup, o.iters, ours));
      best_b = std::min(best_b, time_loop(world, o.warmup, o.iters, [&] {
                          raw->run(o.op, raw_in, raw_out, ip, false, o.root, row.s.block);
                        }));
      if (nb)
        best_nb = std::min(best_nb, time_loop(world, o.warmup, o.iters, [&] {
                             raw->run(o.op, raw_in, raw_out, ip, true, o.root, row.s.block);
                           }));
    }
    res.sec = best;
    row.blocking[int(ip)] = {best_b, 0, true};
    if (nb) row.nonblocking[int(ip)] = {best_nb, 0, true};
  }
  res.valid = true;
  if (o.check) {
    std::int64_t w = run_check(c, o.op, row.s, in, out, ip, o.redop, o.root);
    MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_INT64_T, MPI_SUM, world);
    res.wrong = w;
  }
  return res;
}

void print_size_row(const Options& o, const Columns& col, const SizeRow& row, bool raw) {
  const Shape& s = row.s;
  if (o.json) {
    nlohmann::json j = {{"type", "size"}, {"op", op_name(o.op)}, {"size_bytes", s.bytes}, {"count", s.count},
                        {"dtype", type_name(o.dtype)}, {"redop", col.redop}, {"root", col.root},
                        {"out_of_place", result_json(row.ours[0], s.bytes, col.factor)},
                        {"in_place", result_json(row.ours[1], s.bytes, col.factor)}};
    if (raw) {
      j["raw_blocking_out_of_place"] = result_json(row.blocking[0], s.bytes, col.factor);
      j["raw_blocking_in_place"] = result_json(row.blocking[1], s.bytes, col.factor);
      j["raw_nonblocking_out_of_place"] = result_json(row.nonblocking[0], s.bytes, col.factor);
      j["raw_nonblocking_in_place"] = result_json(row.nonblocking[1], s.bytes, col.factor);
    }
    print_json_line(j);
  } else {
    std::printf(" %11lld %12lld %9s %6s %5d", (long long)s.bytes, (long long)s.count, type_name(o.dtype),
                col.redop.c_str(), col.root);
    for (const Result& r : row.ours) {
      if (!r.valid) {
        std::printf(" %8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      const double a = algbw_gbps(s.bytes, r.sec);
      std::printf(" %8.1f %7.3f %7.3f %6lld", r.sec * 1e6, a, a * col.factor, (long long)(o.check ? r.wrong : 0));
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

/// The `# ours vs raw MPI` table: ours over raw per size and placement.
void print_raw_table(const Options& o, double factor, const std::vector<SizeRow>& rows) {
  const bool nb = raw_has_nonblocking(o.op);
  std::printf("# ours vs raw MPI (blocking %s%s), same buffers, fastest of %d rounds; ratio = ours/raw\n",
              op_name(o.op), nb ? "; nonblocking I-form + MPI_Wait" : "", o.rounds);
  std::printf("#%11s %5s %9s %8s %8s %8s %8s %7s %7s", "size", "place", "ours", "raw", "ours", "raw", "busbw", "time",
              "");
  if (nb) std::printf(" %8s %8s %7s", "raw-nb", "raw-nb", "busbw");
  std::printf("\n#%11s %5s %9s %8s %8s %8s %8s %7s %7s", "(B)", "", "(us)", "(us)", "busbw", "busbw", "ratio",
              "ratio", "");
  if (nb) std::printf(" %8s %8s %7s", "(us)", "busbw", "ratio");
  std::printf("\n");
  for (const SizeRow& r : rows) {
    for (int p = 0; p < 2; ++p) {
      if (!r.ours[p].valid) continue;
      const double ob = algbw_gbps(r.s.bytes, r.ours[p].sec) * factor;
      const double rb = algbw_gbps(r.s.bytes, r.blocking[p].sec) * factor;
      std::printf(" %11lld %5s %9.1f %8.1f %8.3f %8.3f %8.3f %7.3f %7s", (long long)r.s.bytes, p ? "ip" : "oop",
                  r.ours[p].sec * 1e6, r.blocking[p].sec * 1e6, ob, rb, rb > 0 ? ob / rb : NAN,
                  r.ours[p].sec / r.blocking[p].sec, "");
      if (nb) {
        const double nbb = algbw_gbps(r.s.bytes, r.nonblocking[p].sec) * factor;
        std::printf(" %8.1f %8.3f %7.3f", r.nonblocking[p].sec * 1e6, nbb, nbb > 0 ? ob / nbb : NAN);
      }
      std::printf("\n");
    }
  }
}

void print_footer(const Options& o, double factor, std::int64_t total_wrong, double avg_busbw,
                  const std::vector<SizeRow>& raw_rows, bool raw) {
  if (o.json) {
    print_json_line({{"type", "summary"}, {"wrong", total_wrong}, {"avg_busbw_gbps", avg_busbw}});
  } else {
    std::printf("# Out of bounds values : %lld %s\n", (long long)total_wrong, total_wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n", avg_busbw);
    std::printf("#\n");
    if (raw) print_raw_table(o, factor, raw_rows);
  }
  std::fflush(stdout);
}

}  // namespace

int run_sweep(Communicator& c, MPI_Comm world, const Options& o, bool print) {
  const int n = c.size();
  const Columns col{bus_factor(o.op, n), has_redop(o.op) ? comm::reduce_op_name(o.redop) : "none",
                    has_root(o.op) ? o.root : -1};
  if (print && !o.json) print_table_header();
  std::unique_ptr<RawMpi> raw;
  if (o.compare_raw) raw = std::make_unique<RawMpi>(o.dtype, o.redop);
  std::vector<SizeRow> raw_rows;
  std::int64_t total_wrong = 0;
  double busbw_sum = 0;
  int busbw_n = 0;
  for (std::int64_t bytes = o.min_bytes;;) {
    SizeRow row;
    row.s = shape_for(o.op, bytes, o.dtype, n);
    Buffers buf = make_buffers(o.op, row.s, o.dtype, c.device(), c.rank());
    for (int placement = 0; placement < 2; ++placement) {
      if (placement == 1 && (o.op == Op::kSendRecv || o.op == Op::kAllToAllV)) continue;
      row.ours[placement] = measure_placement(c, world, o, buf, placement == 1, raw.get(), row);
      total_wrong += row.ours[placement].wrong;
      busbw_sum += algbw_gbps(row.s.bytes, row.ours[placement].sec) * col.factor;
      ++busbw_n;
    }
    if (raw) raw_rows.push_back(row);
    if (print) print_size_row(o, col, row, raw != nullptr);
    if (bytes >= o.max_bytes) break;
    std::int64_t next = std::int64_t(double(bytes) * o.factor);
    if (next <= bytes) next = bytes + 1;
    bytes = std::min(next, o.max_bytes);
  }
  const double avg_busbw = busbw_n ? busbw_sum / busbw_n : 0;
  if (print) print_footer(o, col.factor, total_wrong, avg_busbw, raw_rows, raw != nullptr);
  return total_wrong > 0 ? 1 : 0;
}

}  // namespace ht::bench::collectives
