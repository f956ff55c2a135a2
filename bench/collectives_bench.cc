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
// Output: a `#` preamble, the nccl-tests table and footer; with --json one
// JSON object per line instead (a "run" object, one "size" object per size,
// a "summary" object). Only rank 0 prints. Exit: 0, 1 on wrong results, 2 on
// a usage error.
#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ht/core/version.h"
#include "ht/comm/comm_env.h"
#include "ht/comm/communicator.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/comm/nccl_communicator.h"
#include "ht/comm/work.h"
#include "ht/config.h"
#include "ht/core/device.h"
#include "ht/core/error.h"
#include "ht/core/half.h"
#include "ht/core/tensor.h"
#include "ht/ops/matmul.h"
#include "ht/train/metrics.h"

namespace {

using ht::DType;
using ht::Tensor;
using ht::comm::Communicator;
using ht::comm::ReduceOp;
using ht::comm::WorkPtr;
using Clock = std::chrono::steady_clock;

enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kSendRecv };

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string lower_no_sep(std::string s) {
  std::string r;
  for (char c : s)
    if (c != '_' && c != '-') r += char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

Op parse_op(const std::string& s) {
  const std::string k = lower_no_sep(s);
  if (k == "allreduce") return Op::kAllReduce;
  if (k == "reducescatter") return Op::kReduceScatter;
  if (k == "allgather") return Op::kAllGather;
  if (k == "broadcast" || k == "bcast") return Op::kBroadcast;
  if (k == "reduce") return Op::kReduce;
  if (k == "alltoall") return Op::kAllToAll;
  if (k == "sendrecv") return Op::kSendRecv;
  throw UsageError("unknown operation '" + s +
                   "' (all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, send_recv)");
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kReduce: return "reduce";
    case Op::kAllToAll: return "all_to_all";
    case Op::kSendRecv: return "send_recv";
  }
  return "?";
}

bool has_redop(Op op) { return op == Op::kAllReduce || op == Op::kReduceScatter || op == Op::kReduce; }
bool has_root(Op op) { return op == Op::kBroadcast || op == Op::kReduce; }

DType parse_dtype_arg(const std::string& s) {
  const std::string k = lower_no_sep(s);
  if (k == "float" || k == "float32" || k == "f32") return DType::kF32;
  if (k == "half" || k == "float16" || k == "f16") return DType::kF16;
  if (k == "bfloat16" || k == "bf16") return DType::kBF16;
  if (k == "int32" || k == "int" || k == "i32") return DType::kI32;
  throw UsageError("unknown datatype '" + s + "' (float, half, bfloat16, int32)");
}

const char* type_name(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "half";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
  }
  return "?";
}

ReduceOp parse_redop(const std::string& s) {
  const std::string k = lower_no_sep(s);
  if (k == "sum") return ReduceOp::kSum;
  if (k == "avg") return ReduceOp::kAvg;
  if (k == "max") return ReduceOp::kMax;
  if (k == "min") return ReduceOp::kMin;
  throw UsageError("unknown reduction '" + s + "' (sum, avg, max, min)");
}

/// "64M" -> 67108864; K, M, G are powers of 1024 (as nccl-tests).
std::int64_t parse_bytes(const std::string& s) {
  if (s.empty()) throw UsageError("empty size");
  std::size_t end = 0;
  double v = 0;
  try {
    v = std::stod(s, &end);
  } catch (const std::exception&) {
    throw UsageError("bad size '" + s + "'");
  }
  std::string suffix = s.substr(end);
  double mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1024.0;
  else if (suffix == "M" || suffix == "m") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B" && suffix != "b") throw UsageError("bad size suffix in '" + s + "' (K, M, G)");
  if (v < 0) throw UsageError("negative size '" + s + "'");
  return std::int64_t(v * mult);
}

double bus_factor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kReduceScatter:
    case Op::kAllGather:
    case Op::kAllToAll: return double(n - 1) / n;
    case Op::kBroadcast:
    case Op::kReduce:
    case Op::kSendRecv: return 1.0;
  }
  return 1.0;
}

struct Options {
  std::int64_t min_bytes = 32 << 20, max_bytes = 32 << 20;
  double factor = 2;
  Op op = Op::kAllReduce;
  DType dtype = DType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  int root = 0;
  int iters = 20, warmup = 5, check = 1, rounds = 3;
  std::string backend = "mpi";
  bool json = false, compare_raw = false, overlap = false;
  std::int64_t overlap_bytes = 64 << 20;
  std::string overlap_compute = "sgemm";
  int overlap_m = 256;
  double overlap_seconds = 2.0;
  double timeout_s = 0;  // 0: HT_COMM_TIMEOUT or the default
};

// ---- the buffers of one size --------------------------------------------

/// Element counts of one size: `in` and `out` are the per-rank buffer lengths
/// of the out-of-place call; `block` the per-rank block (reduce_scatter,
/// all_gather, all_to_all); `bytes` the size column (nccl-tests').
struct Shape {
  std::int64_t in = 0, out = 0, block = 0, bytes = 0, count = 0;
};

Shape shape_for(Op op, std::int64_t requested_bytes, DType t, int n) {
  const std::int64_t e = std::int64_t(ht::dtype_size(t));
  const std::int64_t count = requested_bytes / e;
  Shape s;
  switch (op) {
    case Op::kAllReduce:
    case Op::kBroadcast:
    case Op::kReduce:
    case Op::kSendRecv: s.in = s.out = s.block = count; break;
    case Op::kReduceScatter:
      s.block = count / n;
      s.in = s.block * n;
      s.out = s.block;
      break;
    case Op::kAllGather:
      s.block = count / n;
      s.in = s.block;
      s.out = s.block * n;
      break;
    case Op::kAllToAll:
      s.block = count / n;
      s.in = s.out = s.block * n;
      break;
  }
  s.bytes = std::max(s.in, s.out) * e;
  s.count = std::max(s.in, s.out);
  return s;
}

// Small integers in [-3, 3], different per rank and index; exact in every dtype.
double pattern(int rank, std::int64_t i) { return double((i * 7 + rank * 3 + 1) % 7) - 3.0; }

void store(Tensor& host, std::int64_t i, double v) {
  switch (host.dtype()) {
    case DType::kF32: host.data<float>()[i] = float(v); break;
    case DType::kF16: host.data<ht::f16>()[i] = ht::to_f16(float(v)); break;
    case DType::kBF16: host.data<ht::bf16>()[i] = ht::to_bf16(float(v)); break;
    case DType::kI32: host.data<std::int32_t>()[i] = std::int32_t(v); break;
  }
}

double load(const Tensor& host, std::int64_t i) {
  switch (host.dtype()) {
    case DType::kF32: return host.data<float>()[i];
    case DType::kF16: return ht::to_float(host.data<ht::f16>()[i]);
    case DType::kBF16: return ht::to_float(host.data<ht::bf16>()[i]);
    case DType::kI32: return host.data<std::int32_t>()[i];
  }
  return 0;
}

/// Sets `t` (on any device) to f(i) for each element.
void fill(Tensor& t, const std::function<double(std::int64_t)>& f) {
  if (!t.defined() || t.numel() == 0) return;
  Tensor host = t.device().is_cpu() ? t : Tensor::empty({t.numel()}, t.dtype());
  for (std::int64_t i = 0; i < t.numel(); ++i) store(host, i, f(i));
  if (!t.device().is_cpu()) t.copy_from(host);
}

/// Elements of `t` that differ from f(i).
std::int64_t count_wrong(const Tensor& t, const std::function<double(std::int64_t)>& f) {
  if (!t.defined() || t.numel() == 0) return 0;
  Tensor host = t.device().is_cpu() ? t : t.to(ht::Device::cpu());
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (load(host, i) != f(i)) ++wrong;
  return wrong;
}

// ---- one operation on our communicator ----------------------------------

struct Buffers {
  Tensor in, out;      // out-of-place
  Tensor ip_buf, ip_in, ip_out;  // in-place: views of ip_buf
};

/// Allocates the buffers of one size on `device`.
Buffers make_buffers(Op op, const Shape& s, DType t, ht::Device device, int rank) {
  Buffers b;
  b.in = Tensor::zeros({s.in}, t, device);
  b.out = Tensor::zeros({s.out}, t, device);
  switch (op) {
    case Op::kReduceScatter:
      b.ip_buf = Tensor::zeros({s.in}, t, device);
      b.ip_in = b.ip_buf;
      b.ip_out = b.ip_buf.slice(rank * s.block, (rank + 1) * s.block);
      break;
    case Op::kAllGather:
      b.ip_buf = Tensor::zeros({s.out}, t, device);
      b.ip_out = b.ip_buf;
      b.ip_in = b.ip_buf.slice(rank * s.block, (rank + 1) * s.block);
      break;
    case Op::kSendRecv: break;  // no in-place form
    default:
      b.ip_buf = Tensor::zeros({s.in}, t, device);
      b.ip_in = b.ip_out = b.ip_buf;
  }
  return b;
}

WorkPtr issue(Communicator& c, Op op, const Tensor& in, Tensor& out, ReduceOp r, int root) {
  const int n = c.size(), rank = c.rank();
  switch (op) {
    case Op::kAllReduce: return c.all_reduce(in, out, r);
    case Op::kReduceScatter: return c.reduce_scatter(in, out, r);
    case Op::kAllGather: return c.all_gather(in, out);
    case Op::kBroadcast: return c.broadcast(out, root);  // in place only
    case Op::kReduce: return c.reduce(in, out, r, root);
    case Op::kAllToAll: return c.all_to_all(in, out);
    case Op::kSendRecv: return c.send_recv(in, (rank + 1) % n, out, (rank - 1 + n) % n);
  }
  return nullptr;
}

/// Fills the inputs of one placement with the check pattern and the outputs
/// with a sentinel, runs the operation once and counts the wrong elements.
std::int64_t run_check(Communicator& c, Op op, const Shape& s, Tensor& in, Tensor& out, bool in_place, ReduceOp r,
                       int root) {
  const int n = c.size(), rank = c.rank();
  const double scale = r == ReduceOp::kAvg ? n : 1;  // avg of multiples of n is exact
  const double sentinel = 99;
  auto reduced = [&](std::int64_t j) {
    double acc = r == ReduceOp::kMax ? -1e9 : r == ReduceOp::kMin ? 1e9 : 0;
    for (int k = 0; k < n; ++k) {
      const double v = pattern(k, j) * scale;
      if (r == ReduceOp::kMax) acc = std::max(acc, v);
      else if (r == ReduceOp::kMin) acc = std::min(acc, v);
      else acc += v;
    }
    return r == ReduceOp::kAvg ? acc / n : acc;
  };
  if (!in_place) fill(out, [&](std::int64_t) { return sentinel; });
  switch (op) {
    case Op::kAllReduce:
    case Op::kReduce:
    case Op::kReduceScatter:
      // (reduce_scatter in place: in is the whole buffer, out its block `rank`.)
      fill(in, [&](std::int64_t j) { return pattern(rank, j) * scale; });
      break;
    case Op::kAllGather:
      if (in_place) fill(out, [&](std::int64_t) { return sentinel; });
      fill(in, [&](std::int64_t i) { return pattern(rank, i); });
      break;
    case Op::kBroadcast:
      fill(out, [&](std::int64_t i) { return rank == root ? pattern(root, i) : sentinel; });
      break;
    case Op::kAllToAll:
      fill(in, [&](std::int64_t j) { return pattern(rank, j); });
      break;
    case Op::kSendRecv:
      fill(in, [&](std::int64_t i) { return pattern(rank, i); });
      break;
  }
  issue(c, op, in, out, r, root)->wait();
  switch (op) {
    case Op::kAllReduce: return count_wrong(out, reduced);
    case Op::kReduce: return rank == root ? count_wrong(out, reduced) : 0;
    case Op::kReduceScatter:
      return count_wrong(out, [&](std::int64_t i) { return reduced(rank * s.block + i); });
    case Op::kAllGather:
      return count_wrong(out, [&](std::int64_t j) { return pattern(int(j / std::max<std::int64_t>(s.block, 1)), j % std::max<std::int64_t>(s.block, 1)); });
    case Op::kBroadcast: return count_wrong(out, [&](std::int64_t i) { return pattern(root, i); });
    case Op::kAllToAll:
      // Block i of out is block `rank` of rank i's input.
      return count_wrong(out, [&](std::int64_t j) {
        const std::int64_t b = std::max<std::int64_t>(s.block, 1);
        return pattern(int(j / b), rank * s.block + j % b);
      });
    case Op::kSendRecv: return count_wrong(out, [&](std::int64_t i) { return pattern((rank - 1 + n) % n, i); });
  }
  return 0;
}

/// Barrier, then `iters` timed iterations of fn(); seconds per iteration,
/// maximum over ranks.
double time_loop(MPI_Comm world, int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  MPI_Barrier(world);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  double sec = std::chrono::duration<double>(Clock::now() - t0).count() / std::max(iters, 1);
  MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, world);
  return sec;
}

// ---- raw MPI -------------------------------------------------------------

template <class H>
H from_float(float f);
template <>
ht::f16 from_float<ht::f16>(float f) { return ht::to_f16(f); }
template <>
ht::bf16 from_float<ht::bf16>(float f) { return ht::to_bf16(f); }

template <class H, int kKind>  // 0 sum, 1 max, 2 min
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = ht::to_float(a[i]), y = ht::to_float(b[i]);
    b[i] = from_float<H>(kKind == 0 ? x + y : kKind == 1 ? std::max(x, y) : std::min(x, y));
  }
}

struct RawMpi {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Datatype type = MPI_FLOAT;
  MPI_Op op = MPI_SUM;
  bool user_op = false;
  bool avg = false;
  DType dtype = DType::kF32;
  int size = 1, rank = 0;

  RawMpi(DType t, ReduceOp r) : dtype(t) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    avg = r == ReduceOp::kAvg;
    const int kind = r == ReduceOp::kMax ? 1 : r == ReduceOp::kMin ? 2 : 0;
    switch (t) {
      case DType::kF32: type = MPI_FLOAT; break;
      case DType::kI32: type = MPI_INT32_T; break;
      case DType::kF16:
      case DType::kBF16: type = MPI_UINT16_T; break;
    }
    if (t == DType::kF16 || t == DType::kBF16) {
      MPI_User_function* fns[2][3] = {{half_op<ht::f16, 0>, half_op<ht::f16, 1>, half_op<ht::f16, 2>},
                                      {half_op<ht::bf16, 0>, half_op<ht::bf16, 1>, half_op<ht::bf16, 2>}};
      MPI_Op_create(fns[t == DType::kBF16][kind], 1, &op);
      user_op = true;
    } else {
      op = kind == 1 ? MPI_MAX : kind == 2 ? MPI_MIN : MPI_SUM;
    }
  }
  ~RawMpi() {
    if (user_op) MPI_Op_free(&op);
    MPI_Comm_free(&comm);
  }
  RawMpi(const RawMpi&) = delete;
  RawMpi& operator=(const RawMpi&) = delete;

  void divide(const Tensor& t) const {
    if (!avg) return;
    Tensor h = t;
    for (std::int64_t i = 0; i < h.numel(); ++i) store(h, i, load(h, i) / size);
  }

  /// One raw call on the same buffers as ours; `nonblocking`: the I-form + MPI_Wait.
  void run(Op o, const Tensor& in, Tensor& out, bool in_place, bool nonblocking, int root, std::int64_t block) {
    void* ip = in.defined() ? in.data_ptr() : nullptr;
    void* op_ = out.defined() ? out.data_ptr() : nullptr;
    const int n_in = int(in.numel()), b = int(block);
    MPI_Request req = MPI_REQUEST_NULL;
    switch (o) {
      case Op::kAllReduce:
        if (nonblocking) MPI_Iallreduce(in_place ? MPI_IN_PLACE : ip, op_, n_in, type, op, comm, &req);
        else MPI_Allreduce(in_place ? MPI_IN_PLACE : ip, op_, n_in, type, op, comm);
        break;
      case Op::kReduceScatter: {
        // In place: MPI's layout (the whole buffer in, block 0 of it out).
        void* recv = in_place ? ip : op_;
        if (nonblocking) MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : ip, recv, b, type, op, comm, &req);
        else MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : ip, recv, b, type, op, comm);
        break;
      }
      case Op::kAllGather:
        if (nonblocking) {
          if (in_place) MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op_, b, type, comm, &req);
          else MPI_Iallgather(ip, b, type, op_, b, type, comm, &req);
        } else {
          if (in_place) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op_, b, type, comm);
          else MPI_Allgather(ip, b, type, op_, b, type, comm);
        }
        break;
      case Op::kBroadcast: MPI_Bcast(op_, int(out.numel()), type, root, comm); break;
      case Op::kReduce:
        MPI_Reduce(in_place && rank == root ? MPI_IN_PLACE : ip, op_, n_in, type, op, root, comm);
        break;
      case Op::kAllToAll:
        if (in_place) MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op_, b, type, comm);
        else MPI_Alltoall(ip, b, type, op_, b, type, comm);
        break;
      case Op::kSendRecv:
        MPI_Sendrecv(ip, n_in, type, (rank + 1) % size, 7, op_, int(out.numel()), type, (rank - 1 + size) % size, 7,
                     comm, MPI_STATUS_IGNORE);
        break;
    }
    if (nonblocking) MPI_Wait(&req, MPI_STATUS_IGNORE);
    if (avg && has_redop(o)) {
      if (o == Op::kReduceScatter) divide(in_place ? in.slice(0, block) : out);
      else if (o != Op::kReduce || rank == root) divide(in_place ? in : out);
    }
  }
};

bool raw_has_nonblocking(Op op) {
  return op == Op::kAllReduce || op == Op::kReduceScatter || op == Op::kAllGather;
}

// ---- output --------------------------------------------------------------

struct Result {
  double sec = NAN;
  std::int64_t wrong = 0;
  bool valid = false;
};

double algbw_gbps(std::int64_t bytes, double sec) { return sec > 0 ? double(bytes) / 1e9 / sec : 0; }

std::string cell_time(const Result& r) {
  char buf[64];
  if (!r.valid) return "    N/A";
  std::snprintf(buf, sizeof buf, "%8.1f", r.sec * 1e6);
  return buf;
}

nlohmann::json result_json(const Result& r, std::int64_t bytes, double factor) {
  if (!r.valid) return nullptr;
  const double a = algbw_gbps(bytes, r.sec);
  return {{"time_us", r.sec * 1e6}, {"algbw_gbps", a}, {"busbw_gbps", a * factor}, {"wrong", r.wrong}};
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// ---- overlap ------------------------------------------------------------

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
      ht::ops::matmul(a, b, c);
      return;
    }
    for (int rep = 0; rep < 64; ++rep)
      for (auto& x : v) x = x * 0.999f + 0.001f;
  }
  float sink() const { return kind == "sgemm" ? c.item(0) : v[0]; }
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

int run_overlap(Communicator& c, MPI_Comm world, const Options& o, bool print) {
  const int rank = c.rank();
  const std::int64_t count = o.overlap_bytes / std::int64_t(ht::dtype_size(o.dtype));
  Tensor in = Tensor::zeros({count}, o.dtype), out = Tensor::zeros({count}, o.dtype);
  fill(in, [&](std::int64_t i) { return pattern(rank, i); });
  Compute comp(o.overlap_compute, o.overlap_m);

  // Calibrate: steps for about --overlap-seconds, the same on every rank.
  int calib = 0;
  const auto c0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - c0).count() < 0.2) {
    comp.step();
    ++calib;
  }
  double per_step = std::chrono::duration<double>(Clock::now() - c0).count() / calib;
  MPI_Allreduce(MPI_IN_PLACE, &per_step, 1, MPI_DOUBLE, MPI_MAX, world);
  const long steps = std::max(10L, long(o.overlap_seconds / per_step));

  auto compute_alone = [&] {
    MPI_Barrier(world);
    const auto t0 = Clock::now();
    for (long i = 0; i < steps; ++i) comp.step();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, world);
    return s;
  };
  // Communication alone: all-reduces back to back.
  issue(c, Op::kAllReduce, in, out, o.redop, 0)->wait();
  const double comm_alone = time_loop(world, 1, std::max(3, o.iters / 4), [&] {
    issue(c, Op::kAllReduce, in, out, o.redop, 0)->wait();
  });

  const double alone1 = compute_alone();
  // Compute with an all-reduce always in flight: re-issued as soon as the
  // previous one completes (polled between compute steps).
  MPI_Barrier(world);
  long completed = 0;
  const double process_cpu0 = process_cpu_seconds(), caller_cpu0 = thread_cpu_seconds();
  WorkPtr w = issue(c, Op::kAllReduce, in, out, o.redop, 0);
  const auto t0 = Clock::now();
  for (long i = 0; i < steps; ++i) {
    comp.step();
    if (w->test()) {
      ++completed;
      w = issue(c, Op::kAllReduce, in, out, o.redop, 0);
    }
  }
  double with = std::chrono::duration<double>(Clock::now() - t0).count();
  // CPU time of this process's other threads (the communication thread, and
  // MPI's own) while the loop ran, as a share of the loop's wall time.
  double others_cpu = (process_cpu_seconds() - process_cpu0) - (thread_cpu_seconds() - caller_cpu0);
  double others_share = others_cpu / with;
  MPI_Allreduce(MPI_IN_PLACE, &others_share, 1, MPI_DOUBLE, MPI_MAX, world);
  // Ranks may have issued different numbers of all-reduces: agree on the
  // largest (before waiting, which needs the peers' matching calls) and catch up.
  long issued = completed + 1, most = issued;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_LONG, MPI_MAX, world);
  std::vector<WorkPtr> pending{w};
  for (long k = issued; k < most; ++k) pending.push_back(issue(c, Op::kAllReduce, in, out, o.redop, 0));
  for (auto& p : pending) p->wait();
  MPI_Allreduce(MPI_IN_PLACE, &with, 1, MPI_DOUBLE, MPI_MAX, world);
  long min_completed = std::max(completed, 1L);
  MPI_Allreduce(MPI_IN_PLACE, &min_completed, 1, MPI_LONG, MPI_MIN, world);
  const double alone2 = compute_alone();
  const double alone = 0.5 * (alone1 + alone2);
  const double loss = 1.0 - alone / with;  // fraction of compute speed lost
  const double comm_during = with / double(min_completed);

  if (print) {
    if (o.json) {
      nlohmann::json j = {{"type", "overlap"}, {"compute", o.overlap_compute}, {"m", o.overlap_m},
                          {"steps", steps}, {"all_reduce_bytes", o.overlap_bytes},
                          {"compute_alone_ms", alone * 1e3}, {"compute_alone_first_ms", alone1 * 1e3},
                          {"compute_alone_second_ms", alone2 * 1e3}, {"compute_with_comm_ms", with * 1e3},
                          {"compute_speed_lost_pct", loss * 100}, {"all_reduces_completed", min_completed},
                          {"all_reduce_alone_ms", comm_alone * 1e3}, {"all_reduce_during_compute_ms", comm_during * 1e3},
                          {"communication_cpu_share", others_share}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("# overlap: compute %s%s, %ld steps; all_reduce of %lld bytes (%s) kept in flight\n",
                  o.overlap_compute.c_str(),
                  o.overlap_compute == "sgemm" ? (" " + std::to_string(o.overlap_m) + "^3").c_str() : "", steps,
                  (long long)o.overlap_bytes, type_name(o.dtype));
      std::printf("#   compute alone          : %9.1f ms  (%.1f before, %.1f after)\n", alone * 1e3, alone1 * 1e3,
                  alone2 * 1e3);
      std::printf("#   compute with all_reduce: %9.1f ms  (%ld all_reduces completed)\n", with * 1e3, min_completed);
      std::printf("#   compute speed lost     : %9.1f %%  (target <= 15 %%)\n", loss * 100);
      std::printf("#   all_reduce alone       : %9.2f ms; during compute about %.2f ms each\n", comm_alone * 1e3,
                  comm_during * 1e3);
      std::printf("#   communication CPU      : %9.1f %% of a core during the loop (most of any rank)\n",
                  others_share * 100);
    }
    std::fflush(stdout);
  }
  return 0;
}

// ---- main ---------------------------------------------------------------

int bench(int argc, char** argv, const ht::comm::MpiRuntime& runtime) {
  const int world_rank = runtime.world_rank(), world_size = runtime.world_size();
  const bool print = world_rank == 0;

  Options o;
  CLI::App app{"ht-collectives-bench: hypertrain collectives, measured and printed as nccl-tests"};
  std::string b = "32M", e = "32M", op_s = "all_reduce", d_s = "float", r_s = "sum";
  app.add_option("-b,--minbytes", b, "smallest size (bytes; K, M, G suffixes)");
  app.add_option("-e,--maxbytes", e, "largest size");
  app.add_option("-f,--stepfactor", o.factor, "multiply the size by this each step");
  app.add_option("-o,--operation", op_s,
                 "all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, send_recv");
  app.add_option("-d,--datatype", d_s, "float, half, bfloat16, int32");
  app.add_option("-r,--redop", r_s, "sum, avg, max, min");
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
  std::string ob = "64M";
  app.add_option("--overlap-bytes", ob, "--overlap: all_reduce size");
  app.add_option("--overlap-compute", o.overlap_compute, "--overlap: sgemm or loop");
  app.add_option("--overlap-m", o.overlap_m, "--overlap: sgemm size m (m x m x m)");
  app.add_option("--overlap-seconds", o.overlap_seconds, "--overlap: length of the compute loop");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    if (!print) return err.get_exit_code() == 0 ? 0 : 2;
    const int code = app.exit(err);
    return code == 0 ? 0 : 2;
  }
  try {
    o.min_bytes = parse_bytes(b);
    o.max_bytes = parse_bytes(e);
    o.overlap_bytes = parse_bytes(ob);
    o.op = parse_op(op_s);
    o.dtype = parse_dtype_arg(d_s);
    o.redop = parse_redop(r_s);
    if (o.factor <= 1 && o.min_bytes != o.max_bytes) throw UsageError("-f must be > 1");
    if (o.min_bytes > o.max_bytes) throw UsageError("-b must not exceed -e");
    if (o.iters < 1 || o.warmup < 0 || o.rounds < 1) throw UsageError("-n and --rounds must be >= 1, -w >= 0");
    if (o.root < 0 || o.root >= world_size) throw UsageError("--root must name a rank of the world");
    if (o.backend != "mpi" && o.backend != "nccl") throw UsageError("--backend must be mpi or nccl");
    if (o.dtype == DType::kI32 && o.redop == ReduceOp::kAvg && has_redop(o.op))
      throw UsageError("avg of int32 is not supported (as in the communicators)");
    if (o.backend == "nccl") {
      if (!ht::comm::nccl_compiled()) throw UsageError("--backend nccl: this build has no NCCL backend");
      if (ht::cuda_device_count() < 1) throw UsageError("--backend nccl: no CUDA device");
      if (o.compare_raw) throw UsageError("--compare-raw compares against raw MPI: use --backend mpi");
      if (o.overlap) throw UsageError("--overlap measures the MPI backend's thread: use --backend mpi");
    }
  } catch (const UsageError& err) {
    if (print) std::fprintf(stderr, "ht-collectives-bench: %s\n", err.what());
    return 2;
  }

  ht::comm::CommOptions copts = ht::comm::comm_options_from_env();
  if (o.timeout_s > 0) copts.timeout = std::chrono::milliseconds(std::int64_t(o.timeout_s * 1000));
  std::unique_ptr<Communicator> host_world = ht::comm::make_mpi_world(copts);
  std::unique_ptr<Communicator> nccl_world;
  if (o.backend == "nccl") {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local);
    int local_rank = 0;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    nccl_world = ht::comm::make_nccl_world(*host_world, local_rank % ht::cuda_device_count(), copts);
  }
  Communicator& c = nccl_world ? *nccl_world : *host_world;
  const int n = c.size(), rank = c.rank();
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);

  // Preamble.
  std::vector<char> hosts(std::size_t(256) * n, 0);
  {
    char mine[256] = {0};
    std::snprintf(mine, sizeof mine, "%s pid %d", runtime.host().c_str(), int(::getpid()));
    MPI_Gather(mine, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, world);
  }
  const double factor = bus_factor(o.op, n);
  const std::string redop_str = has_redop(o.op) ? ht::comm::reduce_op_name(o.redop) : "none";
  const int root_col = has_root(o.op) ? o.root : -1;
  const double timeout_s = std::chrono::duration<double>(copts.timeout).count();
  if (print) {
    if (o.json) {
      nlohmann::json run = {{"type", "run"}, {"build", ht::build_description()}, {"world_size", n},
                            {"backend", o.backend}, {"op", op_name(o.op)}, {"dtype", type_name(o.dtype)},
                            {"redop", redop_str}, {"root", root_col}, {"min_bytes", o.min_bytes},
                            {"max_bytes", o.max_bytes}, {"step_factor", o.factor}, {"iters", o.iters},
                            {"warmup_iters", o.warmup}, {"check", o.check}, {"timeout_s", timeout_s},
                            {"comm_debug", copts.debug}, {"compare_raw", o.compare_raw}, {"rounds", o.rounds},
                            {"omp_num_threads", env_or("OMP_NUM_THREADS", "")}, {"host", runtime.host()}};
      std::printf("%s\n", run.dump().c_str());
    } else {
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
    }
    std::fflush(stdout);
  }

  if (o.overlap) {
    const int rc = run_overlap(c, world, o, print);
    MPI_Comm_free(&world);
    host_world->finalize(copts.timeout);
    return rc;
  }

  if (print && !o.json) {
    std::printf("#\n");
    std::printf("#%48s %31s %31s\n", "", "out-of-place         ", "in-place         ");
    std::printf("#%11s %12s %9s %6s %5s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
                "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("#%11s %12s %9s %6s %5s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  std::unique_ptr<RawMpi> raw;
  if (o.compare_raw) raw = std::make_unique<RawMpi>(o.dtype, o.redop);
  struct RawRow {
    Shape s;
    Result ours[2], blocking[2], nonblocking[2];
  };
  std::vector<RawRow> raw_rows;

  std::int64_t total_wrong = 0;
  double busbw_sum = 0;
  int busbw_n = 0;
  for (std::int64_t bytes = o.min_bytes;;) {
    const Shape s = shape_for(o.op, bytes, o.dtype, n);
    Buffers buf = make_buffers(o.op, s, o.dtype, c.device(), rank);
    Result res[2];
    RawRow rr;
    rr.s = s;
    for (int placement = 0; placement < 2; ++placement) {
      const bool ip = placement == 1;
      if (ip && o.op == Op::kSendRecv) continue;
      Tensor& in = ip ? buf.ip_in : buf.in;
      Tensor& out = ip ? buf.ip_out : buf.out;
      auto ours = [&] { issue(c, o.op, in, out, o.redop, o.root)->wait(); };
      if (!raw) {
        res[placement].sec = time_loop(world, o.warmup, o.iters, ours);
      } else {
        // Alternate ours and raw; keep the fastest round of each.
        Tensor& raw_in = ip ? buf.ip_buf : buf.in;
        Tensor& raw_out = ip ? buf.ip_buf : buf.out;
        const bool nb = raw_has_nonblocking(o.op);
        double best = INFINITY, best_b = INFINITY, best_nb = INFINITY;
        for (int round = 0; round < o.rounds; ++round) {
          best = std::min(best, time_loop(world, o.warmup, o.iters, ours));
          best_b = std::min(best_b, time_loop(world, o.warmup, o.iters, [&] {
                              raw->run(o.op, raw_in, raw_out, ip, false, o.root, s.block);
                            }));
          if (nb)
            best_nb = std::min(best_nb, time_loop(world, o.warmup, o.iters, [&] {
                                 raw->run(o.op, raw_in, raw_out, ip, true, o.root, s.block);
                               }));
        }
        res[placement].sec = best;
        rr.blocking[placement] = {best_b, 0, true};
        if (nb) rr.nonblocking[placement] = {best_nb, 0, true};
      }
      res[placement].valid = true;
      if (o.check) {
        std::int64_t w = run_check(c, o.op, s, in, out, ip, o.redop, o.root);
        MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_INT64_T, MPI_SUM, world);
        res[placement].wrong = w;
        total_wrong += w;
      }
      busbw_sum += algbw_gbps(s.bytes, res[placement].sec) * factor;
      ++busbw_n;
      rr.ours[placement] = res[placement];
    }
    if (raw) raw_rows.push_back(rr);

    if (print) {
      if (o.json) {
        nlohmann::json j = {{"type", "size"}, {"op", op_name(o.op)}, {"size_bytes", s.bytes}, {"count", s.count},
                            {"dtype", type_name(o.dtype)}, {"redop", redop_str}, {"root", root_col},
                            {"out_of_place", result_json(res[0], s.bytes, factor)},
                            {"in_place", result_json(res[1], s.bytes, factor)}};
        if (raw) {
          j["raw_blocking_out_of_place"] = result_json(rr.blocking[0], s.bytes, factor);
          j["raw_blocking_in_place"] = result_json(rr.blocking[1], s.bytes, factor);
          j["raw_nonblocking_out_of_place"] = result_json(rr.nonblocking[0], s.bytes, factor);
          j["raw_nonblocking_in_place"] = result_json(rr.nonblocking[1], s.bytes, factor);
        }
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf(" %11lld %12lld %9s %6s %5d", (long long)s.bytes, (long long)s.count, type_name(o.dtype),
                    redop_str.c_str(), root_col);
        for (const Result& r : res) {
          if (!r.valid) {
            std::printf(" %8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
            continue;
          }
          const double a = algbw_gbps(s.bytes, r.sec);
          std::printf(" %8.1f %7.3f %7.3f %6lld", r.sec * 1e6, a, a * factor, (long long)(o.check ? r.wrong : 0));
        }
        std::printf("\n");
      }
      std::fflush(stdout);
    }
    if (bytes >= o.max_bytes) break;
    std::int64_t next = std::int64_t(double(bytes) * o.factor);
    if (next <= bytes) next = bytes + 1;
    bytes = std::min(next, o.max_bytes);
  }

  const double avg_busbw = busbw_n ? busbw_sum / busbw_n : 0;
  if (print) {
    if (o.json) {
      nlohmann::json j = {{"type", "summary"}, {"wrong", total_wrong}, {"avg_busbw_gbps", avg_busbw}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("# Out of bounds values : %lld %s\n", (long long)total_wrong, total_wrong ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %g\n", avg_busbw);
      std::printf("#\n");
      if (raw) {
        const bool nb = raw_has_nonblocking(o.op);
        std::printf("# ours vs raw MPI (blocking %s%s), same buffers, fastest of %d rounds; ratio = ours/raw\n",
                    op_name(o.op), nb ? "; nonblocking I-form + MPI_Wait" : "", o.rounds);
        std::printf("#%11s %5s %9s %8s %8s %8s %8s %7s %7s", "size", "place", "ours", "raw", "ours", "raw", "busbw",
                    "time", "");
        if (nb) std::printf(" %8s %8s %7s", "raw-nb", "raw-nb", "busbw");
        std::printf("\n#%11s %5s %9s %8s %8s %8s %8s %7s %7s", "(B)", "", "(us)", "(us)", "busbw", "busbw", "ratio",
                    "ratio", "");
        if (nb) std::printf(" %8s %8s %7s", "(us)", "busbw", "ratio");
        std::printf("\n");
        for (const RawRow& r : raw_rows) {
          for (int p = 0; p < 2; ++p) {
            if (!r.ours[p].valid) continue;
            const double ob_ = algbw_gbps(r.s.bytes, r.ours[p].sec) * factor;
            const double rb = algbw_gbps(r.s.bytes, r.blocking[p].sec) * factor;
            std::printf(" %11lld %5s %9.1f %8.1f %8.3f %8.3f %8.3f %7.3f %7s", (long long)r.s.bytes, p ? "ip" : "oop",
                        r.ours[p].sec * 1e6, r.blocking[p].sec * 1e6, ob_, rb, rb > 0 ? ob_ / rb : NAN,
                        r.ours[p].sec / r.blocking[p].sec, "");
            if (nb) {
              const double nbb = algbw_gbps(r.s.bytes, r.nonblocking[p].sec) * factor;
              std::printf(" %8.1f %8.3f %7.3f", r.nonblocking[p].sec * 1e6, nbb, nbb > 0 ? ob_ / nbb : NAN);
            }
            std::printf("\n");
          }
        }
      }
    }
    std::fflush(stdout);
  }

  raw.reset();
  MPI_Comm_free(&world);
  if (nccl_world) nccl_world->finalize(copts.timeout);
  host_world->finalize(copts.timeout);
  return total_wrong > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<ht::comm::MpiRuntime> runtime;
  try {
    runtime.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-collectives-bench: %s\n", e.what());
    return 2;
  }
  try {
    return bench(argc, argv, *runtime);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-collectives-bench: rank %d: %s\n", runtime->world_rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
