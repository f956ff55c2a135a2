// What the modes of ht-collectives-bench share (collectives_bench.cc holds
// main): the operations and their nccl-tests vocabulary, the options, the
// buffers of one size, issuing an operation on a Communicator, checking its
// result and timing it. The modes: collectives_sweep.cc (the nccl-tests table,
// with --compare-raw against collectives_raw_mpi.h) and collectives_overlap.cc.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/comm/communicator.h"
#include "ht/comm/work.h"
#include "ht/core/device.h"
#include "ht/core/tensor.h"

namespace ht::bench::collectives {

using comm::Communicator;
using comm::ReduceOp;
using comm::WorkPtr;

enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kAllToAll, kAllToAllV, kSendRecv };

/// all_to_all_v's uneven blocks (a mixture of experts' dispatch): rank r
/// sends rank j `unit` x (1 + (r + j) mod n) elements, so every rank sends
/// and receives unit x n(n+1)/2 in all; unit = count / (n(n+1)/2).
std::vector<std::int64_t> uneven_send_counts(std::int64_t unit, int rank, int n);
std::vector<std::int64_t> uneven_recv_counts(std::int64_t unit, int rank, int n);

/// A bad command line: rank 0 prints it, every rank exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// nccl-tests' names and ours, case and '_'/'-' ignored ("allreduce",
/// "all_reduce"). Throw UsageError listing the choices.
Op parse_op(const std::string& s);
/// The operations -o names: one, or every one in the order of Op for "all".
std::vector<Op> parse_ops(const std::string& s);
DType parse_dtype_arg(const std::string& s);
ReduceOp parse_redop(const std::string& s);
/// "64M" -> 67108864; K, M, G are powers of 1024 (as nccl-tests).
std::int64_t parse_bytes(const std::string& s);

const char* op_name(Op op);
/// nccl-tests' type names: float, half, bfloat16, int32.
const char* type_name(DType t);
bool has_redop(Op op);
bool has_root(Op op);
/// busbw = algbw x this, as nccl-tests: all_reduce 2(n-1)/n; reduce_scatter,
/// all_gather, all_to_all (n-1)/n; broadcast, reduce, send_recv 1.
double bus_factor(Op op, int n);

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

// ---- the buffers of one size ------------------------------------------------

/// Element counts of one size: `in` and `out` are the per-rank buffer lengths
/// of the out-of-place call; `block` the per-rank block (reduce_scatter,
/// all_gather, all_to_all); `bytes` the size column (nccl-tests').
struct Shape {
  std::int64_t in = 0, out = 0, block = 0, bytes = 0, count = 0;
};

Shape shape_for(Op op, std::int64_t requested_bytes, DType t, int n);

/// Small integers in [-3, 3], different per rank and index; exact in every dtype.
double pattern(int rank, std::int64_t i);
/// Element i of a host tensor of any dtype, as a double.
void store(Tensor& host, std::int64_t i, double v);
double load(const Tensor& host, std::int64_t i);
/// Sets `t` (on any device) to f(i) for each element.
void fill(Tensor& t, const std::function<double(std::int64_t)>& f);

struct Buffers {
  Tensor in, out;                // out-of-place
  Tensor ip_buf, ip_in, ip_out;  // in-place: views of ip_buf
};

/// Allocates the buffers of one size on `device`.
Buffers make_buffers(Op op, const Shape& s, DType t, Device device, int rank);

// ---- one operation on our communicator --------------------------------------

/// Enqueues `op` on `c` (send_recv: to rank + 1, from rank - 1; broadcast in place on `out`).
WorkPtr issue(Communicator& c, Op op, const Tensor& in, Tensor& out, ReduceOp r, int root);

/// Fills the inputs of one placement with the check pattern and the outputs
/// with a sentinel, runs the operation once and counts the wrong elements.
std::int64_t run_check(Communicator& c, Op op, const Shape& s, Tensor& in, Tensor& out, bool in_place, ReduceOp r,
                       int root);

/// fn() `warmup` times, a barrier, then `iters` timed iterations of fn();
/// seconds per iteration, maximum over ranks.
double time_loop(MPI_Comm world, int warmup, int iters, const std::function<void()>& fn);

// ---- the modes ----------------------------------------------------------------

/// The nccl-tests table over sizes min_bytes..max_bytes (and, with
/// --compare-raw, raw MPI side by side); returns 1 when a result was wrong.
int run_sweep(Communicator& c, MPI_Comm world, const Options& o, bool print);
/// Compute slowed down by all-reduces kept in flight (MPI backend); returns 0.
int run_overlap(Communicator& c, MPI_Comm world, const Options& o, bool print);

}  // namespace ht::bench::collectives
