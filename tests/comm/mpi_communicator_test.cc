// MpiCommunicator under mpirun: every collective x dtype x awkward size,
// in-place and out-of-place, every reduce op and root, point-to-point rings,
// groups of a mesh, overlap with compute, argument checks, lifecycle, and
// the flight recorder. Inputs are small integers, so sums are exact in every
// dtype; expected values are computed from the world size.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "ht/comm/agreement.h"
#include "ht/comm/comm_env.h"
#include "ht/comm/flight_recorder.h"
#include "ht/comm/mesh_shape.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/work.h"
#include "ht/core/memory.h"
#include "comm/mpi_world.h"
#include "test_util.h"

namespace ht::comm {
namespace {

using namespace std::chrono_literals;

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
// Awkward sizes: empty, one, primes, a non-power-of-two, one above a power of two.
constexpr std::int64_t kCounts[] = {0, 1, 2, 7, 13, 1000, 4097};

// One world communicator for the whole binary, finalised after the last test.
Communicator& world() { return test::mpi_world(); }

// Small integers in [-5, 5], different on every rank and element.
double value(int rank, std::int64_t i) { return double((i * 7 + rank * 3 + 1) % 11) - 5.0; }

std::vector<double> rank_values(int rank, std::int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = value(rank, i);
  return v;
}

Tensor make(DType t, const std::vector<double>& v) {
  Tensor x = Tensor::empty({std::int64_t(v.size())}, t);
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (t) {
      case DType::kF32: x.data<float>()[i] = float(v[i]); break;
      case DType::kF16: x.data<f16>()[i] = to_f16(float(v[i])); break;
      case DType::kBF16: x.data<bf16>()[i] = to_bf16(float(v[i])); break;
      case DType::kI32: x.data<std::int32_t>()[i] = std::int32_t(v[i]); break;
    }
  }
  return x;
}

Tensor filled(DType t, std::int64_t n, double fill = 99) { return make(t, std::vector<double>(std::size_t(n), fill)); }

std::vector<double> values(const Tensor& x) {
  const auto f = x.to_vector<float>();
  return {f.begin(), f.end()};
}

/// The reduction over ranks of value(r, i).
std::vector<double> reduced(ReduceOp op, std::int64_t n, int size, std::int64_t offset = 0) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double acc = value(0, offset + i);
    for (int r = 1; r < size; ++r) {
      const double x = value(r, offset + i);
      acc = op == ReduceOp::kMax ? std::max(acc, x) : op == ReduceOp::kMin ? std::min(acc, x) : acc + x;
    }
    out[std::size_t(i)] = op == ReduceOp::kAvg ? acc / size : acc;
  }
  return out;
}

/// Exact for sums, max and min of small integers; avg is rounded once to the dtype.
double tolerance(DType t, ReduceOp op) {
  if (op != ReduceOp::kAvg) return 0.0;
  return t == DType::kF16 ? 1e-3 : t == DType::kBF16 ? 8e-3 : 1e-6;
}

::testing::AssertionResult matches(const Tensor& got, const std::vector<double>& want, double rtol = 0.0) {
  const auto g = values(got);
  if (g.size() != want.size())
    return ::testing::AssertionFailure() << "got " << g.size() << " elements, want " << want.size();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (std::abs(g[i] - want[i]) > rtol * std::abs(want[i]))
      return ::testing::AssertionFailure() << "element " << i << " of " << g.size() << ": got " << g[i] << ", want "
                                           << want[i] << " (rtol " << rtol << ")";
  return ::testing::AssertionSuccess();
}

std::string label(DType t, std::int64_t n, const char* extra = "") {
  return std::string(dtype_name(t)) + " n=" + std::to_string(n) + " " + extra;
}

TEST(MpiCommunicator, IdentifiesTheWorld) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(world().rank(), rank);
  EXPECT_EQ(world().size(), size);
  EXPECT_EQ(world().name(), "world");
  EXPECT_EQ(world().device(), Device::cpu());
}

// The agreement collectives: exact 64-bit values (each rank's above 2^32,
// differing in the low bits a float reduction would round away).
TEST(Agreement, SixtyFourBitValuesAndTextAreExact) {
  Communicator& c = world();
  const int r = c.rank(), n = c.size();
  const std::uint64_t mine = (std::uint64_t(7) << 40) + std::uint64_t(r) * 3 + 1;
  const std::vector<std::uint64_t> all = all_gather_u64(c, mine);
  ASSERT_EQ(all.size(), std::size_t(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(all[std::size_t(i)], (std::uint64_t(7) << 40) + std::uint64_t(i) * 3 + 1);
  EXPECT_EQ(agree_min_u64(c, mine), (std::uint64_t(7) << 40) + 1);
  EXPECT_EQ(agree_max_u64(c, mine), (std::uint64_t(7) << 40) + std::uint64_t(n - 1) * 3 + 1);
  const std::int64_t big = (std::int64_t(1) << 40) + r - 5;
  EXPECT_EQ(sum_i64(c, big), std::int64_t(n) * ((std::int64_t(1) << 40) - 5) + std::int64_t(n) * (n - 1) / 2);
  EXPECT_EQ(sum_i64(c, -std::int64_t(r)), -std::int64_t(n) * (n - 1) / 2);
  EXPECT_EQ(agree_min(c, r == n - 1 ? 0 : 1), 0);  // one rank saying no is the group's no
  EXPECT_TRUE(all_equal_u64(c, 0xfeedfacecafebeefull));
  EXPECT_FALSE(all_equal_u64(c, mine));  // n >= 2: the ranks' values differ
  EXPECT_TRUE(all_equal(c, "tp2 pp2 dp1 zero1"));
  EXPECT_FALSE(all_equal(c, r == 0 ? "tp2 pp2 dp1 zero1" : "tp2 pp2 dp1 zero2"));
}

TEST(MpiCommunicator, AllReduceEveryDTypeSizeAndOp) {
  const int rank = world().rank(), size = world().size();
  for (DType t : kDTypes)
    for (ReduceOp op : kOps) {
      if (t == DType::kI32 && op == ReduceOp::kAvg) continue;  // refused: see ArgumentErrors
      for (std::int64_t n : kCounts)
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(label(t, n, (reduce_op_name(op) + (in_place ? " in-place" : "")).c_str()));
          Tensor in = make(t, rank_values(rank, n));
          Tensor out = in_place ? in : filled(t, n);
          world().all_reduce(in, out, op)->wait();
          EXPECT_TRUE(matches(out, reduced(op, n, size), tolerance(t, op)));
          if (!in_place) EXPECT_TRUE(matches(in, rank_values(rank, n))) << "the input was modified";
        }
    }
}

// 64 MiB of f32: i % 5 + rank sums exactly to size * (i % 5) + size * (size - 1) / 2.
TEST(MpiCommunicator, AllReduce64MiB) {
  const int rank = world().rank(), size = world().size();
  const std::int64_t n = (64 << 20) / 4;
  Tensor x = Tensor::empty({n}, DType::kF32);
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < n; ++i) p[i] = float(i % 5 + rank);
  world().all_reduce(x, x, ReduceOp::kSum)->wait();
  std::int64_t wrong = 0, first_wrong = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    const float want = float(size * (i % 5) + size * (size - 1) / 2);
    if (p[i] != want && wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0) << "first wrong element " << first_wrong;
}

TEST(MpiCommunicator, ReduceScatterEveryDTypeSizeAndOp) {
  const int rank = world().rank(), size = world().size();
  for (DType t : kDTypes)
    for (ReduceOp op : kOps) {
      if (t == DType::kI32 && op == ReduceOp::kAvg) continue;
      for (std::int64_t n : {0, 1, 5, 13, 1000})
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(label(t, n, (reduce_op_name(op) + (in_place ? " in-place" : "")).c_str()));
          Tensor in = make(t, rank_values(rank, size * n));
          Tensor out = in_place ? in.slice(rank * n, (rank + 1) * n) : filled(t, n);
          world().reduce_scatter(in, out, op)->wait();
          EXPECT_TRUE(matches(out, reduced(op, n, size, rank * n), tolerance(t, op)));
        }
    }
}

// Above 256 KiB reductions run as a ring of point-to-point steps
// (comm/mpi_ring.h): the same sweep at sizes that are not multiples of the
// group size, so chunks are uneven.
TEST(MpiCommunicator, LargeReductionsTakeTheRing) {
  const int rank = world().rank(), size = world().size();
  for (DType t : kDTypes)
    for (ReduceOp op : kOps) {
      if (t == DType::kI32 && op == ReduceOp::kAvg) continue;
      for (bool in_place : {false, true}) {
        const std::int64_t n = 70001;
        SCOPED_TRACE(label(t, n, ("all_reduce " + reduce_op_name(op) + (in_place ? " in-place" : "")).c_str()));
        Tensor in = make(t, rank_values(rank, n));
        Tensor out = in_place ? in : filled(t, n);
        world().all_reduce(in, out, op)->wait();
        EXPECT_TRUE(matches(out, reduced(op, n, size), tolerance(t, op)));

        const std::int64_t block = 33391;
        SCOPED_TRACE(label(t, block, "reduce_scatter"));
        Tensor rs_in = make(t, rank_values(rank, size * block));
        Tensor rs_out = in_place ? rs_in.slice(rank * block, (rank + 1) * block) : filled(t, block);
        world().reduce_scatter(rs_in, rs_out, op)->wait();
        EXPECT_TRUE(matches(rs_out, reduced(op, block, size, rank * block), tolerance(t, op)));
      }
    }
}

// Which path a reduction takes shows in its scratch: the ring receives each
// chunk into a buffer of its own (MemCategory::kCommunication), while
// MPI_Iallreduce / MPI_Ireduce_scatter_block of f32 out of place need none.
// (reduce_scatter once never took the ring, and every result was still right.)
TEST(MpiCommunicator, RingScratchShowsWhichPathRan) {
  const int rank = world().rank(), size = world().size();
  auto scratch_peak = [](auto&& call) {
    const std::int64_t before = memory_stats(DeviceType::kCPU, MemCategory::kCommunication).current_bytes;
    reset_memory_peaks();
    call();
    return memory_stats(DeviceType::kCPU, MemCategory::kCommunication).peak_bytes - before;
  };
  for (const std::int64_t total : {std::int64_t(1000) * size, std::int64_t(70001) * size}) {
    const bool ring = total * 4 >= std::int64_t(256) << 10;
    const std::int64_t block = total / size;
    SCOPED_TRACE(total);
    Tensor in = make(DType::kF32, rank_values(rank, total)), out = filled(DType::kF32, total);
    const std::int64_t ar = scratch_peak([&] { world().all_reduce(in, out, ReduceOp::kSum)->wait(); });
    Tensor rs_out = filled(DType::kF32, block);
    const std::int64_t rs = scratch_peak([&] { world().reduce_scatter(in, rs_out, ReduceOp::kSum)->wait(); });
    EXPECT_TRUE(matches(out, reduced(ReduceOp::kSum, total, size)));
    EXPECT_TRUE(matches(rs_out, reduced(ReduceOp::kSum, block, size, rank * block)));
    if (ring) {
      EXPECT_GE(ar, total / size * 4) << "all_reduce did not take the ring";
      EXPECT_GE(rs, block * 4) << "reduce_scatter did not take the ring";
    } else {
      EXPECT_EQ(ar, 0) << "all_reduce took the ring";
      EXPECT_EQ(rs, 0) << "reduce_scatter took the ring";
    }
  }
}

TEST(MpiCommunicator, AllGatherEveryDTypeAndSize) {
  const int rank = world().rank(), size = world().size();
  std::vector<std::int64_t> counts(std::begin(kCounts), std::end(kCounts));
  counts.push_back(70001);  // 0.27-1.1 MiB gathered: the ring
  for (DType t : kDTypes)
    for (std::int64_t n : counts)
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(label(t, n, in_place ? "in-place" : ""));
        Tensor out = filled(t, size * n);
        Tensor in = in_place ? out.slice(rank * n, (rank + 1) * n) : Tensor::empty({n}, t);
        in.copy_from(make(t, rank_values(rank, n)));
        world().all_gather(in, out)->wait();
        std::vector<double> want;
        for (int r = 0; r < size; ++r) {
          const auto v = rank_values(r, n);
          want.insert(want.end(), v.begin(), v.end());
        }
        EXPECT_TRUE(matches(out, want));
      }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  const int rank = world().rank(), size = world().size();
  for (int root = 0; root < size; ++root)
    for (DType t : kDTypes)
      for (std::int64_t n : {0, 1, 13, 4097}) {
        SCOPED_TRACE(label(t, n, ("root " + std::to_string(root)).c_str()));
        Tensor x = rank == root ? make(t, rank_values(root, n)) : filled(t, n);
        world().broadcast(x, root)->wait();
        EXPECT_TRUE(matches(x, rank_values(root, n)));
      }
}

TEST(MpiCommunicator, ReduceToEveryRoot) {
  const int rank = world().rank(), size = world().size();
  for (int root = 0; root < size; ++root)
    for (DType t : kDTypes)
      for (ReduceOp op : kOps) {
        if (t == DType::kI32 && op == ReduceOp::kAvg) continue;
        for (std::int64_t n : {0, 1, 13, 1000})
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(label(t, n, (reduce_op_name(op) + " root " + std::to_string(root) +
                                      (in_place ? " in-place" : ""))
                                         .c_str()));
            Tensor in = make(t, rank_values(rank, n));
            // Off the root, out is ignored: pass nothing at all half of the time.
            Tensor out = in_place ? in : rank == root || n % 2 ? filled(t, n) : Tensor();
            world().reduce(in, out, op, root)->wait();
            if (rank == root) EXPECT_TRUE(matches(out, reduced(op, n, size), tolerance(t, op)));
          }
      }
}

TEST(MpiCommunicator, AllToAll) {
  const int rank = world().rank(), size = world().size();
  // Element k of block j sent by rank r: value(r, j * n + k).
  for (DType t : kDTypes)
    for (std::int64_t n : {0, 1, 3, 10, 1001})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(label(t, n, in_place ? "in-place" : ""));
        Tensor in = make(t, rank_values(rank, size * n));
        Tensor out = in_place ? in : filled(t, size * n);
        world().all_to_all(in, out)->wait();
        std::vector<double> want;
        for (int i = 0; i < size; ++i)
          for (std::int64_t k = 0; k < n; ++k) want.push_back(value(i, rank * n + k));
        EXPECT_TRUE(matches(out, want));
      }
}

TEST(MpiCommunicator, AllToAllWithUnevenBlocks) {
  const int rank = world().rank(), size = world().size();
  // Rank r sends rank p count(r, p) elements, some of them none; element k
  // of that block is value(r, 100 p + k).
  for (std::int64_t scale : {1, 300})
    for (DType t : kDTypes) {
      SCOPED_TRACE(label(t, scale, "uneven"));
      const auto count = [&](int from, int to) { return scale * ((from + 2 * to) % 3); };
      std::vector<std::int64_t> send, recv;
      std::vector<double> in_values, want;
      for (int p = 0; p < size; ++p) {
        send.push_back(count(rank, p));
        recv.push_back(count(p, rank));
        for (std::int64_t k = 0; k < count(rank, p); ++k) in_values.push_back(value(rank, 100 * p + k));
        for (std::int64_t k = 0; k < count(p, rank); ++k) want.push_back(value(p, 100 * rank + k));
      }
      Tensor in = make(t, in_values), out = filled(t, std::int64_t(want.size()));
      world().all_to_all_v(in, send, out, recv)->wait();
      EXPECT_TRUE(matches(out, want));
    }
}

TEST(MpiCommunicator, AllToAllWithUnevenBlocksRefusesCountsThatDoNotFit) {
  const int size = world().size();
  Tensor in = filled(DType::kF32, 2 * size), out = filled(DType::kF32, 2 * size);
  const std::vector<std::int64_t> twos(std::size_t(size), 2);
  EXPECT_TRUE(test::throws_error([&] { world().all_to_all_v(in, {2}, out, twos); }, ErrorKind::kInvalidArgument,
                                 {"all_to_all_v", "send_counts has 1 entries"}) ||
              size == 1);
  std::vector<std::int64_t> three = twos;
  three[0] = 3;
  EXPECT_TRUE(test::throws_error([&] { world().all_to_all_v(in, twos, out, three); }, ErrorKind::kShapeMismatch,
                                 {"recv_counts add up to", "'out' holds"}));
  EXPECT_TRUE(test::throws_error([&] { world().all_to_all_v(in, twos, in, twos); }, ErrorKind::kInvalidArgument,
                                 {"all_to_all_v is not in place"}));
}

TEST(MpiCommunicator, SendRecvRing) {
  const int rank = world().rank(), size = world().size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  // 300000 f32 (1.2 MB) goes by rendezvous: both calls are queued before either is waited for.
  for (DType t : kDTypes)
    for (std::int64_t n : {0, 1, 1000, 300000}) {
      SCOPED_TRACE(label(t, n, "ring"));
      Tensor s = make(t, rank_values(rank, n));
      Tensor r = filled(t, n);
      WorkPtr sent = world().send(s, next);
      WorkPtr got = world().recv(r, prev);
      got->wait();
      sent->wait();
      EXPECT_TRUE(matches(r, rank_values(prev, n)));
    }
}

TEST(MpiCommunicator, PairedSendRecv) {
  const int rank = world().rank(), size = world().size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  for (DType t : kDTypes)
    for (std::int64_t n : {0, 1, 999, 300000})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(label(t, n, in_place ? "send_recv in-place" : "send_recv"));
        Tensor s = make(t, rank_values(rank, n));
        Tensor r = in_place ? s : filled(t, n);
        world().send_recv(s, next, r, prev)->wait();
        EXPECT_TRUE(matches(r, rank_values(prev, n)));
      }
}

// What a transfer took from the cores: the communication thread's CPU
// time grows with the bytes it moves (64 MiB each way, a copy at least).
TEST(MpiCommunicator, OwnThreadsCpuTimeCountsTheTransfers) {
  const int rank = world().rank(), size = world().size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const double before = world().own_threads_cpu_ms();
  EXPECT_GE(before, 0);
  const std::int64_t n = std::int64_t(16) << 20;
  Tensor s = filled(DType::kF32, n, rank);
  Tensor r = filled(DType::kF32, n);
  for (int k = 0; k < 4; ++k) world().send_recv(s, next, r, prev)->wait();
  const double after = world().own_threads_cpu_ms();
  EXPECT_GT(after, before + 1.0) << "256 MiB received moved without the thread's CPU time growing";
  EXPECT_EQ(r.data<float>()[n - 1], float(prev));
}

TEST(MpiCommunicator, BarrierAndManyOperationsInFlight) {
  const int rank = world().rank(), size = world().size();
  world().barrier()->wait();
  // 40 operations queued at once, waited for in reverse order.
  std::vector<Tensor> xs;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 40; ++k) {
    xs.push_back(make(DType::kI32, std::vector<double>(std::size_t(k + 1), double(rank + k))));
    works.push_back(world().all_reduce(xs.back(), xs.back(), ReduceOp::kSum));
  }
  works.push_back(world().barrier());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 40; ++k)
    EXPECT_TRUE(matches(xs[std::size_t(k)],
                        std::vector<double>(std::size_t(k + 1), double(size * k + size * (size - 1) / 2))));
  for (auto& w : works) EXPECT_TRUE(w->test());
}

// The 2x2 mesh at 4 ranks (tp 2 x dp size/2 in general): the tp and dp groups
// from split hold the ranks MeshShape says, in order, and reduce over them.
TEST(MpiCommunicator, SplitIntoMeshGroups) {
  const int rank = world().rank(), size = world().size();
  if (size % 2 != 0) GTEST_SKIP() << "needs an even world size";
  const MeshShape mesh(size, /*tp=*/2, /*pp=*/1);
  for (MeshAxis axis : {MeshAxis::kTp, MeshAxis::kDp}) {
    const int index = mesh.group_index(rank, axis);
    const std::string name = axis_name(axis) + "." + std::to_string(index);
    SCOPED_TRACE(name);
    auto group = world().split(index, rank, name);
    ASSERT_NE(group, nullptr);
    const std::vector<int> members = mesh.group(rank, axis);
    EXPECT_EQ(group->name(), name);
    EXPECT_EQ(group->size(), int(members.size()));
    EXPECT_EQ(group->rank(), int(std::find(members.begin(), members.end(), rank) - members.begin()));

    Tensor x = make(DType::kI32, {double(rank + 1), double(10 * (rank + 1))});
    group->all_reduce(x, x, ReduceOp::kSum)->wait();
    double member_sum = 0;
    for (int m : members) member_sum += m + 1;
    EXPECT_TRUE(matches(x, {member_sum, 10 * member_sum}));

    Tensor mine = make(DType::kF32, {double(rank)});
    Tensor all = filled(DType::kF32, group->size());
    group->all_gather(mine, all)->wait();
    EXPECT_TRUE(matches(all, std::vector<double>(members.begin(), members.end())));
    group->finalize(10s);
  }
}

TEST(MpiCommunicator, SplitWithNegativeColourJoinsNoGroup) {
  const int rank = world().rank(), size = world().size();
  auto rest = world().split(rank == 0 ? -1 : 0, -rank, "not_rank0");  // reversed order by key
  if (rank == 0) {
    EXPECT_EQ(rest, nullptr);
    return;
  }
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->size(), size - 1);
  EXPECT_EQ(rest->rank(), size - 1 - rank);
  Tensor x = make(DType::kF32, {double(rank)});
  rest->all_reduce(x, x, ReduceOp::kSum)->wait();
  EXPECT_TRUE(matches(x, {double(size * (size - 1) / 2)}));
  // A group of a group.
  auto solo = rest->split(rest->rank(), 0, "solo");
  ASSERT_NE(solo, nullptr);
  EXPECT_EQ(solo->size(), 1);
  solo->all_reduce(x, x, ReduceOp::kSum)->wait();
  EXPECT_TRUE(matches(x, {double(size * (size - 1) / 2)}));
  solo->finalize(10s);
  rest->finalize(10s);
}

// A large all-reduce in flight while this thread computes: the result is
// right and the compute loop finishes (the caller is never blocked in MPI).
TEST(MpiCommunicator, OverlapsWithCompute) {
  const int rank = world().rank(), size = world().size();
  const std::int64_t n = 4 << 20;
  Tensor x = Tensor::empty({n}, DType::kF32);
  std::fill_n(x.data<float>(), n, float(rank + 1));
  WorkPtr w = world().all_reduce(x, x, ReduceOp::kSum);
  const bool done_at_once = w->test();
  volatile double acc = 0;
  for (int i = 0; i < 3000000; ++i) acc = acc + std::sqrt(double(i));
  w->wait();
  EXPECT_GT(acc, 0.0);
  const float want = float(size * (size + 1) / 2);
  EXPECT_EQ(x.data<float>()[0], want);
  EXPECT_EQ(x.data<float>()[n - 1], want);
  if (rank == 0) std::printf("[ info     ] 16 MiB all_reduce done before the first test(): %d\n", int(done_at_once));
}

// A small collective on an idle communicator is issued and polled on the
// caller's thread; one whose peers are late is handed to the communication
// thread. Both complete with the right result, and a small collective issued
// behind a large one in flight waits its turn on the thread.
TEST(MpiCommunicator, SmallCollectivesOnTheCallersThreadAndHandedOff) {
  const int rank = world().rank(), size = world().size();
  const double rank_sum = double(size * (size - 1) / 2);
  const auto& mpi = dynamic_cast<const MpiCommunicator&>(world());
  world().barrier()->wait();
  // Rank 0 arrives 50 ms late: the others' callers give up polling and hand off.
  const CallerPathCounts before_late = mpi.caller_path_counts();
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Tensor late = make(DType::kF32, {double(rank), 1});
  world().all_reduce(late, late, ReduceOp::kSum)->wait();
  EXPECT_TRUE(matches(late, {rank_sum, double(size)}));
  const CallerPathCounts after_late = mpi.caller_path_counts();
  if (rank != 0) EXPECT_EQ(after_late.handed_off, before_late.handed_off + 1) << "a late peer forces the hand-off";
  EXPECT_EQ(after_late.completed_on_caller + after_late.handed_off,
            before_late.completed_on_caller + before_late.handed_off + 1);

  // Ranks in step: small collectives complete where they were called.
  world().barrier()->wait();
  const CallerPathCounts before_loop = mpi.caller_path_counts();
  for (int i = 0; i < 20; ++i) world().all_reduce(late, late, ReduceOp::kMax)->wait();
  EXPECT_GT(mpi.caller_path_counts().completed_on_caller, before_loop.completed_on_caller);

  // A ring all-reduce in flight, then small ones of every dtype queued behind it.
  const std::int64_t n = 1 << 20;
  Tensor big = Tensor::empty({n}, DType::kF32);
  std::fill_n(big.data<float>(), n, float(rank + 1));
  std::vector<WorkPtr> works{world().all_reduce(big, big, ReduceOp::kSum)};
  std::vector<Tensor> small;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    small.push_back(make(t, {double(rank), 2}));
    works.push_back(world().all_reduce(small.back(), small.back(), ReduceOp::kSum));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  EXPECT_EQ(big.data<float>()[n - 1], float(size * (size + 1) / 2));
  for (const Tensor& s : small) EXPECT_TRUE(matches(s, {rank_sum, 2.0 * size})) << dtype_name(s.dtype());
}

// Latency of an 8-byte all-reduce through the communicator, against a raw
// blocking MPI_Allreduce on a duplicate of MPI_COMM_WORLD in this process.
TEST(MpiCommunicator, SmallMessageLatency) {
  const int size = world().size();
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  Tensor x = make(DType::kF32, {1, 2});
  float buf[2] = {1, 2};
  const int iters = 300;
  auto time_us = [&](auto&& fn) {
    for (int i = 0; i < 30; ++i) fn();
    MPI_Barrier(raw);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  };
  const double raw_us = time_us([&] { MPI_Allreduce(MPI_IN_PLACE, buf, 2, MPI_FLOAT, MPI_MAX, raw); });
  const double ours_us = time_us([&] { world().all_reduce(x, x, ReduceOp::kMax)->wait(); });
  const double raw2_us = time_us([&] { MPI_Allreduce(MPI_IN_PLACE, buf, 2, MPI_FLOAT, MPI_MAX, raw); });
  MPI_Comm_free(&raw);
  if (world().rank() == 0)
    std::printf("[ info     ] 8-byte all_reduce at %d ranks: communicator %.1f us, raw MPI %.1f / %.1f us\n", size,
                ours_us, raw_us, raw2_us);
  EXPECT_TRUE(matches(x, {1, 2}));
  // A sanity bound only: the machine is shared and oversubscribed.
  EXPECT_LT(ours_us, 20000.0);
}

TEST(MpiCommunicator, ArgumentErrorsNameTheOperationGroupAndCounts) {
  const int size = world().size();
  Tensor a = filled(DType::kF32, 10), b = filled(DType::kF32, 9);
  EXPECT_TRUE(test::throws_error([&] { world().all_reduce(a, b, ReduceOp::kSum); }, ErrorKind::kShapeMismatch,
                                 {"all_reduce", "'world'", "10", "9"}));
  Tensor big = filled(DType::kF32, 3 * size + 1), small = filled(DType::kF32, 3);
  EXPECT_TRUE(test::throws_error([&] { world().reduce_scatter(big, small, ReduceOp::kSum); },
                                 ErrorKind::kShapeMismatch, {"reduce_scatter", std::to_string(3 * size + 1), "3"}));
  EXPECT_TRUE(test::throws_error([&] { world().all_gather(small, big); }, ErrorKind::kShapeMismatch,
                                 {"all_gather", std::to_string(3 * size + 1)}));
  Tensor h = filled(DType::kF16, 10);
  EXPECT_TRUE(test::throws_error([&] { world().all_reduce(a, h, ReduceOp::kSum); }, ErrorKind::kDTypeMismatch,
                                 {"all_reduce", "f32", "f16"}));
  Tensor ints = filled(DType::kI32, 4);
  EXPECT_TRUE(test::throws_error([&] { world().all_reduce(ints, ints, ReduceOp::kAvg); }, ErrorKind::kNotSupported,
                                 {"avg", "i32"}));
  EXPECT_TRUE(test::throws_error([&] { world().broadcast(a, size); }, ErrorKind::kOutOfRange,
                                 {"broadcast", "root", std::to_string(size)}));
  EXPECT_TRUE(test::throws_error([&] { world().send(a, -1); }, ErrorKind::kOutOfRange, {"send", "peer"}));
  Tensor whole = filled(DType::kF32, 20);
  Tensor lo = whole.slice(0, 10), hi = whole.slice(5, 15);
  EXPECT_TRUE(test::throws_error([&] { world().all_reduce(lo, hi, ReduceOp::kSum); }, ErrorKind::kInvalidArgument,
                                 {"all_reduce", "overlap"}));
  Tensor undefined;
  EXPECT_TRUE(test::throws_error([&] { world().all_reduce(undefined, a, ReduceOp::kSum); },
                                 ErrorKind::kInvalidArgument, {"undefined"}));
  Tensor odd = filled(DType::kF32, size + 1);
  if (size > 1)
    EXPECT_TRUE(test::throws_error([&] { world().all_to_all(odd, odd); }, ErrorKind::kShapeMismatch,
                                   {"all_to_all", "multiple"}));
  // Nothing was queued: the world still works.
  world().barrier()->wait();
}

TEST(MpiCommunicator, LifecycleFinalizeAbortAndDestroy) {
  const int rank = world().rank();
  auto c = world().split(0, rank, "lifecycle");
  WorkPtr w = c->barrier();
  c->finalize(10s);
  c->finalize(10s);  // idempotent
  w->wait();         // completed before finalize returned
  EXPECT_TRUE(test::throws_error([&] { c->barrier(); }, ErrorKind::kComm, {"finalised"}));

  auto d = world().split(0, rank, "aborted");
  d->abort();
  d->abort();  // idempotent, never throws
  Tensor x = filled(DType::kF32, 3);
  EXPECT_THROW(d->all_reduce(x, x, ReduceOp::kSum), CommError);
  d->finalize(1s);  // after an abort: releases without throwing
  d.reset();

  // A Work may outlive its communicator.
  auto e = world().split(0, rank, "outlived");
  WorkPtr last = e->all_reduce(x, x, ReduceOp::kMax);
  last->wait();
  e->finalize(10s);
  e.reset();
  EXPECT_TRUE(last->test());

  // Destroyed without finalize() while idle: its thread is gone, its completed Work still reads as done.
  auto f = world().split(0, rank, "dropped");
  WorkPtr done = f->barrier();
  done->wait();
  f.reset();
  EXPECT_TRUE(done->test());
}

// A small collective handed to the communication thread (its peers are
// late) and then aborted fails with CommError; the peers, arriving later,
// still complete theirs, and the aborted rank's abandoned request completes
// with them, so nothing is leaked.
TEST(MpiCommunicator, AbortWhileASmallCollectiveIsHandedOff) {
  const int rank = world().rank(), size = world().size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  auto c = world().split(0, rank, "abort_handed_off");
  const auto& mpi = dynamic_cast<const MpiCommunicator&>(*c);
  Tensor x = make(DType::kF32, {double(rank + 1)});
  if (rank == 0) {
    WorkPtr w = c->all_reduce(x, x, ReduceOp::kSum);
    EXPECT_EQ(mpi.caller_path_counts().handed_off, 1u) << "the peers are 100 ms late";
    c->abort();
    EXPECT_TRUE(test::throws_error([&] { w->wait(); }, ErrorKind::kComm, {"all_reduce #1", "aborted"}));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c->all_reduce(x, x, ReduceOp::kSum)->wait();
    EXPECT_TRUE(matches(x, {double(size * (size + 1) / 2)}));
  }
  world().barrier()->wait();
  c->finalize(5s);  // after the abort, rank 0's releases without throwing
}

TEST(MpiCommunicator, RecvOfTheWrongCountFailsThatCommunicatorOnly) {
  const int rank = world().rank(), size = world().size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  auto c = world().split(0, rank, "p2p_count");
  if (rank == 0) {
    Tensor s = filled(DType::kI32, 5, 1);
    c->send(s, 1)->wait();
  } else if (rank == 1) {
    Tensor r = filled(DType::kI32, 6);
    WorkPtr w = c->recv(r, 0);
    EXPECT_TRUE(test::throws_error([&] { w->wait(); }, ErrorKind::kShapeMismatch, {"recv from rank 0", "5", "6"}));
    EXPECT_THROW(c->barrier(), CommError);
  }
  c->finalize(10s);
  world().barrier()->wait();
}

// More sent than the receiver posted (a pipeline stage that sends (B, T, 2C)
// where the next declared (B, T, C)): an error naming both counts, on that
// communicator only, never a crash. Posted as it was, Open MPI's shared-memory
// single copy wrote the large message past the receiving tensor (a heap
// corrupted: "free(): corrupted unsorted chunks" in the next test); small
// (eager) and large (rendezvous) messages alike.
TEST(MpiCommunicator, RecvOfFewerThanSentFailsByName) {
  const int rank = world().rank(), size = world().size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  for (const std::int64_t n : {std::int64_t(6), std::int64_t(98304)}) {
    SCOPED_TRACE(n);
    auto c = world().split(0, rank, "p2p_truncate");
    if (rank == 0) {
      Tensor s = filled(DType::kF32, 2 * n, 1);
      WorkPtr w = c->send(s, 1);
      try {
        w->wait();  // completes, or fails when the receiver aborted first
      } catch (const CommError&) {
      }
    } else if (rank == 1) {
      Tensor r = filled(DType::kF32, n);
      WorkPtr w = c->recv(r, 0);
      EXPECT_TRUE(test::throws_error([&] { w->wait(); }, ErrorKind::kShapeMismatch,
                                     {"recv from rank 0 got " + std::to_string(2 * n) + " elements of f32",
                                      "holds " + std::to_string(n), "must agree on the count"}));
      EXPECT_THROW(c->barrier(), CommError);
    }
    try {
      c->finalize(10s);
    } catch (const CommError&) {
    }
    world().barrier()->wait();
  }
}

// A message that is not a whole number of the receiver's elements (3 f16
// into f32): named by its bytes.
TEST(MpiCommunicator, RecvOfPartElementsSaysTheBytes) {
  const int rank = world().rank(), size = world().size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  auto c = world().split(0, rank, "p2p_bytes");
  if (rank == 0) {
    c->send(filled(DType::kF16, 3, 1), 1)->wait();
  } else if (rank == 1) {
    Tensor r = filled(DType::kF32, 2);
    WorkPtr w = c->recv(r, 0);
    EXPECT_TRUE(test::throws_error([&] { w->wait(); }, ErrorKind::kShapeMismatch,
                                   {"recv from rank 0 got 1 elements of f32 but the receiving tensor holds 2",
                                    "(6 bytes, not a whole number of elements)"}));
  }
  try {
    c->finalize(10s);
  } catch (const CommError&) {
  }
  world().barrier()->wait();
}

// finalize() with a receive whose sender never sends: CommTimeout naming the
// operation and where the peer is; the abandoned receive is cancelled, so MPI
// still finalises cleanly at the end.
TEST(MpiCommunicator, FinalizeTimesOutNamingTheStuckOperation) {
  const int rank = world().rank(), size = world().size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  auto c = world().split(0, rank, "fin");
  if (rank == 1) {
    Tensor r = filled(DType::kF32, 4);
    WorkPtr w = c->recv(r, 0);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(test::throws_error([&] { c->finalize(300ms); }, ErrorKind::kComm,
                                   {"finalize() of group 'fin'", "recv #1 from rank 0 on group 'fin' (4 x f32)",
                                    "did not complete within 300 ms", "rank 0 has made 0 point-to-point call(s)"}));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_THROW(w->wait(), CommError);
    EXPECT_THROW(c->barrier(), CommError);
  }
  world().barrier()->wait();  // the others keep 'fin' alive (answering rank 1's query) until here
  if (rank != 1) c->finalize(10s);
}

TEST(MpiCommunicator, FlightRecorderRecordsEveryOperation) {
  const int rank = world().rank();
  auto c = world().split(0, rank, "recorded");
  Tensor x = filled(DType::kF32, 7);
  c->all_reduce(x, x, ReduceOp::kMax)->wait();
  c->broadcast(x, 0)->wait();
  c->barrier()->wait();
  c->finalize(10s);
  std::vector<FlightEntry> mine;
  for (const FlightEntry& e : FlightRecorder::global().entries())
    if (std::string(e.group) == "recorded") mine.push_back(e);
  ASSERT_EQ(mine.size(), 3u);
  const char* ops[] = {"all_reduce", "broadcast", "barrier"};
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].seq, i + 1);
    EXPECT_STREQ(mine[i].op, ops[i]);
    EXPECT_EQ(mine[i].state, OpState::kCompleted);
    EXPECT_GT(mine[i].start_us, 0);
    EXPECT_GE(mine[i].end_us, mine[i].start_us);
  }
  EXPECT_EQ(mine[0].count, 7);
  EXPECT_EQ(mine[1].peer, 0);
}

TEST(FlightRecorder, KeepsTheLastEntriesAndDumpsJson) {
  FlightRecorder fr(3);
  std::vector<std::uint64_t> ids;
  for (int s = 1; s <= 5; ++s) ids.push_back(fr.record("all_gather", "g", std::uint64_t(s), s * 10, DType::kBF16, -1));
  fr.update(ids[0], OpState::kFailed);  // overwritten: no effect
  fr.update(ids[4], OpState::kStarted);
  fr.update(ids[4], OpState::kCompleted);
  const auto entries = fr.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].seq, 3u);
  EXPECT_EQ(entries[2].seq, 5u);
  EXPECT_EQ(entries[0].state, OpState::kEnqueued);
  EXPECT_EQ(entries[2].state, OpState::kCompleted);
  EXPECT_GT(entries[2].end_us, 0);

  const auto dir = std::filesystem::temp_directory_path() /
                   ("ht_fr_test_" + std::to_string(world().rank()) + "_" + std::to_string(::getpid()));
  const std::string path = fr.dump(dir.string(), 7, "a \"quoted\" reason");
  EXPECT_EQ(std::filesystem::path(path).filename(), "flight_recorder_rank7.json");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"all_gather\""), std::string::npos);
  EXPECT_NE(text.str().find("\"bf16\""), std::string::npos);
  EXPECT_NE(text.str().find("a \\\"quoted\\\" reason"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(CommOptionsFromEnv, ReadsTimeoutAndDebug) {
  ::setenv("HT_COMM_TIMEOUT", "2.5", 1);
  ::setenv("HT_COMM_DEBUG", "1", 1);
  CommOptions o = comm_options_from_env();
  EXPECT_EQ(o.timeout, 2500ms);
  EXPECT_TRUE(o.debug);
  ::setenv("HT_COMM_TIMEOUT", "soon", 1);
  EXPECT_TRUE(test::throws_error([] { comm_options_from_env(); }, ErrorKind::kConfig, {"HT_COMM_TIMEOUT", "soon"}));
  ::setenv("HT_COMM_TIMEOUT", "300", 1);
  ::setenv("HT_COMM_DEBUG", "yes", 1);
  EXPECT_TRUE(test::throws_error([] { comm_options_from_env(); }, ErrorKind::kConfig, {"HT_COMM_DEBUG"}));
  ::unsetenv("HT_COMM_TIMEOUT");
  ::unsetenv("HT_COMM_DEBUG");
  CommOptions defaults;
  defaults.timeout = 7s;
  EXPECT_EQ(comm_options_from_env(defaults).timeout, 7s);
  EXPECT_FALSE(comm_options_from_env(defaults).debug);
}

}  // namespace
}  // namespace ht::comm
