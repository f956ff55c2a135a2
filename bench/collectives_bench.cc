// ht-collectives-bench: the collectives of a hypertrain Communicator, measured
// and printed as nccl-tests does (same flags, columns and bus-bandwidth
// factors), so that the figures read like every other collective benchmark.
//
//   mpirun -np 2 ht-collectives-bench -b 8 -e 64M -f 4 -o all_reduce [-d float] [-r sum]
//          [-n 20] [-w 5] [-c 1] [--backend mpi|nccl] [--json] [--compare-raw] [--overlap]
//
// Per size: out-of-place then in-place; each times `-n` iterations of
// enqueue + wait after `-w` warm-up iterations and a barrier, and reports the
// average time per iteration, maximum over ranks. algbw = size / time;
// busbw = algbw x the nccl-tests factor of the operation (all_reduce
// 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; broadcast,
// reduce, send_recv 1). Size is nccl-tests' size: the per-rank buffer for
// all_reduce, broadcast, reduce, send_recv; the whole send buffer for
// reduce_scatter and the whole receive buffer for all_gather and all_to_all.
// With -c 1 each size and placement is then run once more on inputs whose
// results are exact in every dtype (small integers depending on rank and
// index) and the wrong elements are counted (#wrong, summed over ranks); the
// program exits 1 if any is wrong.
//
// --compare-raw (MPI backend): the same sizes through raw blocking MPI calls
// on the same buffers in the same process (MPI_Allreduce, MPI_Reduce_scatter_block,
// MPI_Allgather, MPI_Bcast, MPI_Reduce, MPI_Alltoall, MPI_Sendrecv) and, for
// all_reduce, reduce_scatter and all_gather, their nonblocking forms followed
// by MPI_Wait; ours and raw alternate `--rounds` times per size and placement
// and the fastest round of each is kept; a second table gives ours/raw.
// f16/bf16 reductions go through user MPI_Ops that compute in f32 (MPI has no
// such types), avg as a sum then a local division.
//
// --overlap (MPI backend): how much a compute loop (sgemm through
// ht::ops::matmul, or a plain arithmetic loop) slows down while all-reduces of
// --overlap-bytes are in flight, against the same loop alone.
//
// This file holds main, the flags and the preamble; the modes are
// collectives_sweep.cc (the table, --compare-raw) and collectives_overlap.cc.
//
// Output: a `#` preamble, the nccl-tests table and footer; with --json one
// JSON object per line instead (a "run" object, one "size" object per size,
// a "summary" object). Only rank 0 prints. Exit: 0, 1 on wrong results, 2 on
// a usage error.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "collectives_common.h"
#include "ht/comm/comm_env.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/nccl_communicator.h"
#include "ht/core/version.h"

namespace ht::bench::collectives {
namespace {

/// The command line as given, before parsing sizes and names.
struct Flags {
  std::string min_bytes = "32M", max_bytes = "32M", op = "all_reduce", dtype = "float", redop = "sum";
  std::string overlap_bytes = "64M";
};

void add_flags(CLI::App& app, Options& o, Flags& f) {
  app.add_option("-b,--minbytes", f.min_bytes, "smallest size (bytes; K, M, G suffixes)");
  app.add_option("-e,--maxbytes", f.max_bytes, "largest size");
  app.add_option("-f,--stepfactor", o.factor, "multiply the size by this each step");
  app.add_option("-o,--operation", f.op,
                 "all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, all_to_all_v, send_recv, or all "
                 "(each in turn, a table each)");
  app.add_option("-d,--datatype", f.dtype, "float, half, bfloat16, int32");
  app.add_option("-r,--redop", f.redop, "sum, avg, max, min");
  app.add_option("--root", o.root, "root of broadcast and reduce");
  app.add_option("-n,--iters", o.iters, "timed iterations per size");
  app.add_option("-w,--warmup_iters", o.warmup, "warm-up iterations per size");
  app.add_option("-c,--check", o.check, "check results (1) or not (0)");
  app.add_option("--backend", o.backend, "mpi or nccl");
  app.add_option("-T,--timeout", o.timeout_s, "deadline of each operation in seconds (default HT_COMM_TIMEOUT or 300)");
  app.add_flag("--json", o.json, "one JSON object per line instead of the table");
  app.add_flag("--compare-raw", o.compare_raw, "also run raw MPI calls on the same buffers; print ours/raw");
  app.add_option("--rounds", o.rounds, "--compare-raw: alternations of ours and raw per size (fastest kept)");
  app.add_flag("--overlap", o.overlap, "measure compute slowdown while all-reduces are in flight");
  app.add_option("--overlap-bytes", f.overlap_bytes, "--overlap: all_reduce size");
  app.add_option("--overlap-compute", o.overlap_compute, "--overlap: sgemm or loop");
  app.add_option("--overlap-m", o.overlap_m, "--overlap: sgemm size m (m x m x m)");
  app.add_option("--overlap-seconds", o.overlap_seconds, "--overlap: length of the compute loop");
}

/// Parses sizes and names into `o` and checks that they fit together; returns
/// the operations to run (o.op is the first); throws UsageError.
std::vector<Op> resolve(Options& o, const Flags& f, int world_size) {
  o.min_bytes = parse_bytes(f.min_bytes);
  o.max_bytes = parse_bytes(f.max_bytes);
  o.overlap_bytes = parse_bytes(f.overlap_bytes);
  const std::vector<Op> ops = parse_ops(f.op);
  o.op = ops.front();
  o.dtype = parse_dtype_arg(f.dtype);
  o.redop = parse_redop(f.redop);
  if (o.factor <= 1 && o.min_bytes != o.max_bytes) throw UsageError("-f must be > 1");
  if (o.min_bytes > o.max_bytes) throw UsageError("-b must not exceed -e");
  if (o.iters < 1 || o.warmup < 0 || o.rounds < 1) throw UsageError("-n and --rounds must be >= 1, -w >= 0");
  if (o.root < 0 || o.root >= world_size) throw UsageError("--root must name a rank of the world");
  if (o.backend != "mpi" && o.backend != "nccl") throw UsageError("--backend must be mpi or nccl");
  if (o.dtype == DType::kI32 && o.redop == ReduceOp::kAvg && std::any_of(ops.begin(), ops.end(), has_redop))
    throw UsageError("avg of int32 is not supported (as in the communicators)");
  if (o.overlap && ops.size() > 1) throw UsageError("--overlap measures all_reduce alone: drop -o all");
  if (o.backend == "nccl") {
    if (!comm::nccl_compiled()) throw UsageError("--backend nccl: this build has no NCCL backend");
    if (cuda_device_count() < 1) throw UsageError("--backend nccl: no CUDA device");
    if (o.compare_raw) throw UsageError("--compare-raw compares against raw MPI: use --backend mpi");
    if (o.overlap) throw UsageError("--overlap measures the MPI backend's thread: use --backend mpi");
  }
  return ops;
}

/// The NCCL world over `host_world`, one device per rank of a node.
std::unique_ptr<Communicator> make_nccl(Communicator& host_world, int world_rank, const comm::CommOptions& copts) {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  return comm::make_nccl_world(host_world, local_rank % cuda_device_count(), copts);
}

/// "<host> pid <pid>" of every rank, on rank 0 (collective over `world`).
std::vector<char> gather_hosts(MPI_Comm world, int n, const std::string& host) {
  std::vector<char> hosts(std::size_t(256) * n, 0);
  char mine[256] = {0};
  std::snprintf(mine, sizeof mine, "%s pid %d", host.c_str(), int(::getpid()));
  MPI_Gather(mine, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, world);
  return hosts;
}

void print_preamble(const Options& o, const comm::CommOptions& copts, const comm::MpiRuntime& runtime, int n,
                    const std::vector<char>& hosts) {
  const double factor = bus_factor(o.op, n);
  const std::string redop_str = has_redop(o.op) ? comm::reduce_op_name(o.redop) : "none";
  const int root_col = has_root(o.op) ? o.root : -1;
  const double timeout_s = std::chrono::duration<double>(copts.timeout).count();
  if (o.json) {
    print_json_line({{"type", "run"}, {"build", ht::build_description()}, {"world_size", n},
                     {"backend", o.backend}, {"op", op_name(o.op)}, {"dtype", type_name(o.dtype)},
                     {"redop", redop_str}, {"root", root_col}, {"min_bytes", o.min_bytes},
                     {"max_bytes", o.max_bytes}, {"step_factor", o.factor}, {"iters", o.iters},
                     {"warmup_iters", o.warmup}, {"check", o.check}, {"timeout_s", timeout_s},
                     {"comm_debug", copts.debug}, {"compare_raw", o.compare_raw}, {"rounds", o.rounds},
                     {"omp_num_threads", env_or("OMP_NUM_THREADS", "")}, {"host", runtime.host()}});
    return;
  }
  std::printf("# ht-collectives-bench: %s\n", ht::build_description().c_str());
  std::printf("# world_size %d  backend %s  op %s  dtype %s  redop %s  root %d\n", n, o.backend.c_str(),
              op_name(o.op), type_name(o.dtype), redop_str.c_str(), root_col);
  std::printf("# minBytes %lld  maxBytes %lld  step %g (factor)  warmup iters %d  iters %d  validation %d\n",
              (long long)o.min_bytes, (long long)o.max_bytes, o.factor, o.warmup, o.iters, o.check);
  std::printf("# timeout %g s  HT_COMM_DEBUG %d  OMP_NUM_THREADS %s  busbw factor %.4f%s\n", timeout_s,
              int(copts.debug), env_or("OMP_NUM_THREADS", "(unset)").c_str(), factor,
              o.compare_raw ? ("  compare-raw rounds " + std::to_string(o.rounds)).c_str() : "");
  for (int r = 0; r < n; ++r) std::printf("#  Rank %2d on %s\n", r, &hosts[std::size_t(256) * r]);
  if (o.op == Op::kBroadcast) std::printf("# broadcast is in place only: both placements time the same call\n");
  if (o.op == Op::kSendRecv) std::printf("# send_recv: to rank+1, from rank-1; no in-place form\n");
  if (o.op == Op::kAllToAllV)
    std::printf("# all_to_all_v: rank r sends rank j (1 + (r + j) mod n) units, the size column their sum; no "
                "in-place form\n");
}

int collectives_bench(int argc, char** argv, const comm::MpiRuntime& runtime) {
  const bool print = runtime.world_rank() == 0;
  Options o;
  Flags f;
  CLI::App app{"ht-collectives-bench: hypertrain collectives, measured and printed as nccl-tests"};
  add_flags(app, o, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    if (!print) return err.get_exit_code() == 0 ? 0 : 2;
    const int code = app.exit(err);
    return code == 0 ? 0 : 2;
  }
  std::vector<Op> ops;
  try {
    ops = resolve(o, f, runtime.world_size());
  } catch (const UsageError& err) {
    if (print) std::fprintf(stderr, "ht-collectives-bench: %s\n", err.what());
    return 2;
  }

  comm::CommOptions copts = comm::comm_options_from_env();
  if (o.timeout_s > 0) copts.timeout = std::chrono::milliseconds(std::int64_t(o.timeout_s * 1000));
  std::unique_ptr<Communicator> host_world = comm::make_mpi_world(copts);
  std::unique_ptr<Communicator> nccl_world;
  if (o.backend == "nccl") nccl_world = make_nccl(*host_world, runtime.world_rank(), copts);
  Communicator& c = nccl_world ? *nccl_world : *host_world;
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  const std::vector<char> hosts = gather_hosts(world, c.size(), runtime.host());
  int rc = 0;
  for (Op op : ops) {  // -o all: each operation a run of its own, preamble and footer included
    o.op = op;
    if (print) {
      print_preamble(o, copts, runtime, c.size(), hosts);
      std::fflush(stdout);
    }
    rc = std::max(rc, o.overlap ? run_overlap(c, world, o, print) : run_sweep(c, world, o, print));
  }
  MPI_Comm_free(&world);
  if (nccl_world) nccl_world->finalize(copts.timeout);
  host_world->finalize(copts.timeout);
  return rc;
}

}  // namespace
}  // namespace ht::bench::collectives

int main(int argc, char** argv) {
  // Any failure after start-up may leave peers waiting in a collective: abort the job.
  return ht::bench::mpi_bench_main(argc, argv, "ht-collectives-bench", ht::bench::collectives::collectives_bench,
                                   ht::bench::OnConfigError::kAbort);
}
