// What the modes of ht-collectives-bench share (collectives_common.h).
#include "collectives_common.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <vector>

#include "ht/core/half.h"

namespace ht::bench::collectives {
namespace {

using Clock = std::chrono::steady_clock;

std::string lower_no_sep(std::string s) {
  std::string r;
  for (char c : s)
    if (c != '_' && c != '-') r += char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

/// Elements of `t` that differ from f(i).
std::int64_t count_wrong(const Tensor& t, const std::function<double(std::int64_t)>& f) {
  if (!t.defined() || t.numel() == 0) return 0;
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (load(host, i) != f(i)) ++wrong;
  return wrong;
}

}  // namespace

std::vector<Op> parse_ops(const std::string& s) {
  if (lower_no_sep(s) == "all")
    return {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather, Op::kBroadcast, Op::kReduce, Op::kAllToAll,
            Op::kAllToAllV, Op::kSendRecv};
  return {parse_op(s)};
}

Op parse_op(const std::string& s) {
  const std::string k = lower_no_sep(s);
  if (k == "allreduce") return Op::kAllReduce;
  if (k == "reducescatter") return Op::kReduceScatter;
  if (k == "allgather") return Op::kAllGather;
  if (k == "broadcast" || k == "bcast") return Op::kBroadcast;
  if (k == "reduce") return Op::kReduce;
  if (k == "alltoall") return Op::kAllToAll;
  if (k == "alltoallv") return Op::kAllToAllV;
  if (k == "sendrecv") return Op::kSendRecv;
  throw UsageError("unknown operation '" + s +
                   "' (all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, all_to_all_v, "
                   "send_recv)");
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kReduce: return "reduce";
    case Op::kAllToAll: return "all_to_all";
    case Op::kAllToAllV: return "all_to_all_v";
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
    case Op::kAllToAll:
    case Op::kAllToAllV: return double(n - 1) / n;
    case Op::kBroadcast:
    case Op::kReduce:
    case Op::kSendRecv: return 1.0;
  }
  return 1.0;
}

Shape shape_for(Op op, std::int64_t requested_bytes, DType t, int n) {
  const std::int64_t e = std::int64_t(dtype_size(t));
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
    case Op::kAllToAllV:  // block: the unit of the uneven splits
      s.block = count / (std::int64_t(n) * (n + 1) / 2);
      s.in = s.out = s.block * (std::int64_t(n) * (n + 1) / 2);
      break;
  }
  s.bytes = std::max(s.in, s.out) * e;
  s.count = std::max(s.in, s.out);
  return s;
}

double pattern(int rank, std::int64_t i) { return double((i * 7 + rank * 3 + 1) % 7) - 3.0; }

void store(Tensor& host, std::int64_t i, double v) {
  switch (host.dtype()) {
    case DType::kF32: host.data<float>()[i] = float(v); break;
    case DType::kF16: host.data<f16>()[i] = to_f16(float(v)); break;
    case DType::kBF16: host.data<bf16>()[i] = to_bf16(float(v)); break;
    case DType::kI32: host.data<std::int32_t>()[i] = std::int32_t(v); break;
  }
}

double load(const Tensor& host, std::int64_t i) {
  switch (host.dtype()) {
    case DType::kF32: return host.data<float>()[i];
    case DType::kF16: return to_float(host.data<f16>()[i]);
    case DType::kBF16: return to_float(host.data<bf16>()[i]);
    case DType::kI32: return host.data<std::int32_t>()[i];
  }
  return 0;
}

void fill(Tensor& t, const std::function<double(std::int64_t)>& f) {
  if (!t.defined() || t.numel() == 0) return;
  Tensor host = t.device().is_cpu() ? t : Tensor::empty({t.numel()}, t.dtype());
  for (std::int64_t i = 0; i < t.numel(); ++i) store(host, i, f(i));
  if (!t.device().is_cpu()) t.copy_from(host);
}

Buffers make_buffers(Op op, const Shape& s, DType t, Device device, int rank) {
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
    case Op::kSendRecv:
    case Op::kAllToAllV: break;  // no in-place form
    default:
      b.ip_buf = Tensor::zeros({s.in}, t, device);
      b.ip_in = b.ip_out = b.ip_buf;
  }
  return b;
}

std::vector<std::int64_t> uneven_send_counts(std::int64_t unit, int rank, int n) {
  std::vector<std::int64_t> counts;
  for (int j = 0; j < n; ++j) counts.push_back(unit * (1 + (rank + j) % n));
  return counts;
}

std::vector<std::int64_t> uneven_recv_counts(std::int64_t unit, int rank, int n) {
  return uneven_send_counts(unit, rank, n);  // r sends j what j sends r: the rule is symmetric
}

// ---- one operation on our communicator ----------------------------------

WorkPtr issue(Communicator& c, Op op, const Tensor& in, Tensor& out, ReduceOp r, int root) {
  const int n = c.size(), rank = c.rank();
  switch (op) {
    case Op::kAllReduce: return c.all_reduce(in, out, r);
    case Op::kReduceScatter: return c.reduce_scatter(in, out, r);
    case Op::kAllGather: return c.all_gather(in, out);
    case Op::kBroadcast: return c.broadcast(out, root);  // in place only
    case Op::kReduce: return c.reduce(in, out, r, root);
    case Op::kAllToAll: return c.all_to_all(in, out);
    case Op::kAllToAllV: {
      const std::int64_t unit = in.numel() / (std::int64_t(n) * (n + 1) / 2);
      return c.all_to_all_v(in, uneven_send_counts(unit, rank, n), out, uneven_recv_counts(unit, rank, n));
    }
    case Op::kSendRecv: return c.send_recv(in, (rank + 1) % n, out, (rank - 1 + n) % n);
  }
  return nullptr;
}

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
    case Op::kAllToAllV:
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
    case Op::kAllToAllV: {
      // Rank i's block for this rank, in rank order: its offset in i's
      // input is the sum of i's blocks for the ranks before this one.
      std::vector<std::int64_t> source, offset;  // per element of out
      for (int i = 0; i < n; ++i) {
        const std::vector<std::int64_t> sent = uneven_send_counts(s.block, i, n);
        std::int64_t at = 0;
        for (int j = 0; j < rank; ++j) at += sent[std::size_t(j)];
        for (std::int64_t e = 0; e < sent[std::size_t(rank)]; ++e) source.push_back(i), offset.push_back(at + e);
      }
      return count_wrong(out, [&](std::int64_t j) {
        return pattern(int(source[std::size_t(j)]), offset[std::size_t(j)]);
      });
    }
    case Op::kSendRecv: return count_wrong(out, [&](std::int64_t i) { return pattern((rank - 1 + n) % n, i); });
  }
  return 0;
}

double time_loop(MPI_Comm world, int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  MPI_Barrier(world);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  double sec = std::chrono::duration<double>(Clock::now() - t0).count() / std::max(iters, 1);
  MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, world);
  return sec;
}

}  // namespace ht::bench::collectives
