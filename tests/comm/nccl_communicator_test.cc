// The NCCL communicator on the device: every operation, dtype and reduction,
// in and out of place, split, barrier, stream ordering, argument errors, the
// lifecycle (finalize, abort) and a deadline. Written for any number of ranks
// (expected values come from the world size) and run with one rank and one
// GPU, where a size-1 communicator still takes every path through NCCL.
// Skips visibly without a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ht/comm/mpi_communicator.h"
#include "ht/comm/nccl_communicator.h"
#include "ht/core/device.h"
#include "ht/ops/cast.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/matmul.h"
#include "test_util.h"

namespace ht::comm {
namespace {

using test::throws_error;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
constexpr float kSentinel = -7.f;  // in outputs before a call: a result never equals it

/// The MPI world (bootstrap only) and the NCCL world on this rank's device.
struct Comms {
  std::unique_ptr<Communicator> host;
  std::unique_ptr<Communicator> nccl;

  Communicator& operator*() const { return *nccl; }
  Communicator* operator->() const { return nccl.get(); }
  /// Graceful end, NCCL first (its bootstrap peer is the MPI world).
  void finalize() {
    nccl->finalize(std::chrono::seconds(60));
    host->finalize(std::chrono::seconds(60));
  }
};

Comms make_comms(const CommOptions& options = {}) {
  Comms c;
  c.host = make_mpi_world(options);
  c.nccl = make_nccl_world(*c.host, c.host->rank() % cuda_device_count(), options);
  return c;
}

/// A device tensor of `dtype` holding `values` (small integers or halves:
/// exact in every dtype).
Tensor device_tensor(const std::vector<float>& values, DType dtype, Device device) {
  const Shape shape{std::int64_t(values.size())};
  if (dtype == DType::kI32) {
    std::vector<std::int32_t> ints;
    for (float v : values) ints.push_back(std::int32_t(v));
    return Tensor::from_vector(ints, shape).to(device);
  }
  Tensor f32 = Tensor::from_vector(values, shape);
  if (dtype == DType::kF32) return f32.to(device);
  Tensor narrow = Tensor::empty(shape, dtype);
  ops::cast(f32, narrow);
  return narrow.to(device);
}

Tensor sentinel_tensor(std::int64_t n, DType dtype, Device device) {
  return device_tensor(std::vector<float>(std::size_t(n), kSentinel), dtype, device);
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

/// Every element of `got` equals `want` within `rtol` of it: exactly by
/// default (inputs are small integers, exact in every dtype and sum).
::testing::AssertionResult all_equal(const std::vector<float>& got, const std::vector<float>& want, double rtol = 0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", want " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(double(got[i]) - double(want[i])) > rtol * std::abs(double(want[i])))
      return ::testing::AssertionFailure() << "element " << i << " is " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

/// An average over a world size that is not a power of two is not exact in
/// f32 (NCCL scales each contribution by 1/size before summing).
double tolerance(ReduceOp op) { return op == ReduceOp::kAvg ? 1e-6 : 0; }

/// Rank r contributes (r + 1) * k_i with k_i = i % 5 + 1; the reduction over
/// ranks 1..n of (r + 1) is n(n+1)/2 (sum), (n+1)/2 (avg), n (max), 1 (min).
float rank_factor(ReduceOp op, int size) {
  switch (op) {
    case ReduceOp::kSum: return float(size * (size + 1) / 2);
    case ReduceOp::kAvg: return float(size + 1) / 2.f;
    case ReduceOp::kMax: return float(size);
    case ReduceOp::kMin: return 1.f;
  }
  return 0.f;
}

std::vector<float> contribution(std::int64_t n, int rank, std::int64_t offset = 0) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = float((rank + 1) * ((offset + i) % 5 + 1));
  return v;
}

std::vector<float> reduced(std::int64_t n, ReduceOp op, int size, std::int64_t offset = 0) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = rank_factor(op, size) * float((offset + i) % 5 + 1);
  return v;
}

std::string trace(DType dtype, ReduceOp op, bool in_place, std::int64_t n) {
  return std::string(dtype_name(dtype)) + " " + reduce_op_name(op) + (in_place ? " in place" : " out of place") +
         " n=" + std::to_string(n);
}

TEST(NcclCommunicator, AllReduceEveryOpAndDtype) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  EXPECT_EQ(c->name(), "world");
  EXPECT_TRUE(c->device().is_cuda());
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (bool in_place : {false, true})
        for (std::int64_t n : {0, 1, 7, 1000}) {
          SCOPED_TRACE(trace(dtype, op, in_place, n));
          Tensor in = device_tensor(contribution(n, rank), dtype, c->device());
          Tensor out = in_place ? in : sentinel_tensor(n, dtype, c->device());
          if (dtype == DType::kI32 && op == ReduceOp::kAvg) {
            EXPECT_TRUE(throws_error([&] { c->all_reduce(in, out, op); }, ErrorKind::kNotSupported, {"avg of i32"}));
            continue;
          }
          c->all_reduce(in, out, op)->wait();
          EXPECT_TRUE(all_equal(values(out), reduced(n, op, size), tolerance(op)));
        }
  c.finalize();
}

TEST(NcclCommunicator, ReduceScatter) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax})
      for (bool in_place : {false, true})
        for (std::int64_t n : {0, 1, 5, 333}) {
          if (dtype == DType::kI32 && op == ReduceOp::kAvg) continue;
          SCOPED_TRACE(trace(dtype, op, in_place, n));
          Tensor in = device_tensor(contribution(std::int64_t(size) * n, rank), dtype, c->device());
          // In place (NCCL's layout): out is block rank() of in.
          Tensor out = in_place ? in.slice(rank * n, (rank + 1) * n) : sentinel_tensor(n, dtype, c->device());
          c->reduce_scatter(in, out, op)->wait();
          EXPECT_TRUE(all_equal(values(out), reduced(n, op, size, rank * n), tolerance(op)));
        }
  c.finalize();
}

TEST(NcclCommunicator, AllGather) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  for (DType dtype : kAllDTypes)
    for (bool in_place : {false, true})
      for (std::int64_t n : {0, 1, 6, 517}) {
        SCOPED_TRACE(trace(dtype, ReduceOp::kSum, in_place, n));
        Tensor out = sentinel_tensor(std::int64_t(size) * n, dtype, c->device());
        Tensor in = device_tensor(contribution(n, rank), dtype, c->device());
        if (in_place) {
          // In place (NCCL's layout): in is block rank() of out.
          Tensor block = out.slice(rank * n, (rank + 1) * n);
          block.copy_from(in);
          in = block;
        }
        c->all_gather(in, out)->wait();
        std::vector<float> want;
        for (int r = 0; r < size; ++r) {
          const std::vector<float> block = contribution(n, r);
          want.insert(want.end(), block.begin(), block.end());
        }
        EXPECT_TRUE(all_equal(values(out), want));
      }
  c.finalize();
}

TEST(NcclCommunicator, BroadcastFromEveryRoot) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  for (DType dtype : kAllDTypes)
    for (int root : {0, size - 1})
      for (std::int64_t n : {0, 1, 300}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " root " + std::to_string(root) + " n=" + std::to_string(n));
        Tensor t = rank == root ? device_tensor(contribution(n, root), dtype, c->device())
                                : sentinel_tensor(n, dtype, c->device());
        c->broadcast(t, root)->wait();
        EXPECT_TRUE(all_equal(values(t), contribution(n, root)));
      }
  c.finalize();
}

TEST(NcclCommunicator, ReduceToRoot) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (int root : {0, size - 1})
        for (bool in_place : {false, true}) {
          if (dtype == DType::kI32 && op == ReduceOp::kAvg) continue;
          const std::int64_t n = 129;
          SCOPED_TRACE(trace(dtype, op, in_place, n) + " root " + std::to_string(root));
          Tensor in = device_tensor(contribution(n, rank), dtype, c->device());
          // Off the root, out is ignored: pass an undefined tensor.
          Tensor out = rank != root ? Tensor() : in_place ? in : sentinel_tensor(n, dtype, c->device());
          c->reduce(in, out, op, root)->wait();
          if (rank == root) {
            EXPECT_TRUE(all_equal(values(out), reduced(n, op, size), tolerance(op)));
          }
        }
  c.finalize();
}

TEST(NcclCommunicator, AllToAll) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  // Element e of block j on rank r: r * 20 + j * 5 + e % 5 (exact in bf16 for up to 8 ranks).
  auto blocks = [&](std::int64_t n, auto value) {
    std::vector<float> v;
    for (int j = 0; j < size; ++j)
      for (std::int64_t e = 0; e < n; ++e) v.push_back(value(j, e));
    return v;
  };
  for (DType dtype : kAllDTypes)
    for (bool in_place : {false, true})
      for (std::int64_t n : {0, 1, 6, 250}) {
        SCOPED_TRACE(trace(dtype, ReduceOp::kSum, in_place, n));
        Tensor in = device_tensor(blocks(n, [&](int j, std::int64_t e) { return float(rank * 20 + j * 5 + e % 5); }),
                                  dtype, c->device());
        Tensor out = in_place ? in : sentinel_tensor(std::int64_t(size) * n, dtype, c->device());
        c->all_to_all(in, out)->wait();
        // Block i of out came from rank i, which sent its block `rank`.
        EXPECT_TRUE(
            all_equal(values(out), blocks(n, [&](int i, std::int64_t e) { return float(i * 20 + rank * 5 + e % 5); })));
      }
  c.finalize();
}

TEST(NcclCommunicator, AllToAllWithUnevenBlocks) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  // Rank r sends rank p (r + 2p) % 3 x n elements (some blocks empty),
  // element e of it r * 20 + p * 5 + e % 5.
  for (DType dtype : kAllDTypes)
    for (std::int64_t n : {1, 7}) {
      SCOPED_TRACE(trace(dtype, ReduceOp::kSum, false, n));
      const auto count = [&](int from, int to) { return n * ((from + 2 * to) % 3 + (size == 1 ? 1 : 0)); };
      std::vector<std::int64_t> send, recv;
      std::vector<float> in_values, want;
      for (int p = 0; p < size; ++p) {
        send.push_back(count(rank, p));
        recv.push_back(count(p, rank));
        for (std::int64_t e = 0; e < count(rank, p); ++e) in_values.push_back(float(rank * 20 + p * 5 + e % 5));
        for (std::int64_t e = 0; e < count(p, rank); ++e) want.push_back(float(p * 20 + rank * 5 + e % 5));
      }
      Tensor in = device_tensor(in_values, dtype, c->device());
      Tensor out = sentinel_tensor(std::int64_t(want.size()), dtype, c->device());
      c->all_to_all_v(in, send, out, recv)->wait();
      EXPECT_TRUE(all_equal(values(out), want));
    }
  c.finalize();
}

TEST(NcclCommunicator, SendRecvRingIncludingSelf) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  // With one rank the ring is an exchange with itself.
  const int dst = (rank + 1) % size, src = (rank + size - 1) % size;
  for (DType dtype : kAllDTypes)
    for (std::int64_t n : {0, 1, 1024}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      Tensor send = device_tensor(contribution(n, rank), dtype, c->device());
      Tensor recv = sentinel_tensor(n, dtype, c->device());
      c->send_recv(send, dst, recv, src)->wait();
      EXPECT_TRUE(all_equal(values(recv), contribution(n, src)));
    }
  c.finalize();
}

TEST(NcclCommunicator, SendAndRecvBetweenPairs) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  Tensor t = device_tensor(contribution(64, rank), DType::kF32, c->device());
  // A lone send to (or receive from) itself could never complete.
  EXPECT_TRUE(throws_error([&] { c->send(t, rank); }, ErrorKind::kInvalidArgument, {"send_recv"}));
  EXPECT_TRUE(throws_error([&] { c->recv(t, rank); }, ErrorKind::kInvalidArgument, {"send_recv"}));
  // Pairs (0, 1), (2, 3), ...: even ranks send first, odd ranks receive first.
  const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  if (peer < size) {
    Tensor got = sentinel_tensor(64, DType::kF32, c->device());
    if (rank % 2 == 0) {
      c->send(t, peer)->wait();
      c->recv(got, peer)->wait();
    } else {
      c->recv(got, peer)->wait();
      c->send(t, peer)->wait();
    }
    EXPECT_TRUE(all_equal(values(got), contribution(64, peer)));
  }
  c.finalize();
}

TEST(NcclCommunicator, BarrierAndTest) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  for (int i = 0; i < 3; ++i) c->barrier()->wait();
  WorkPtr w = c->barrier();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!w->test()) ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "barrier never completed";
  EXPECT_TRUE(w->test());  // stays done
  w->wait();
  c.finalize();
}

TEST(NcclCommunicator, SplitByParity) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int rank = c->rank(), size = c->size();
  // Ranks of my parity, ordered by key = size - rank (so in reverse).
  std::vector<int> members;
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == rank % 2) members.push_back(r);
  std::unique_ptr<Communicator> half = c->split(rank % 2, size - rank, "parity");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->name(), "parity");
  EXPECT_EQ(half->device(), c->device());
  EXPECT_EQ(half->size(), int(members.size()));
  int want_rank = 0;
  while (members[std::size_t(want_rank)] != rank) ++want_rank;
  EXPECT_EQ(half->rank(), want_rank);

  Tensor x = device_tensor({float(rank + 1)}, DType::kF32, c->device());
  Tensor sum = sentinel_tensor(1, DType::kF32, c->device());
  half->all_reduce(x, sum, ReduceOp::kSum)->wait();
  float want = 0;
  for (int r : members) want += float(r + 1);
  EXPECT_EQ(values(sum)[0], want);

  // The parent still works beside its child, and a split of a split too.
  c->barrier()->wait();
  std::unique_ptr<Communicator> again = half->split(0, half->rank(), "parity.all");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->size(), half->size());
  again->barrier()->wait();

  // A negative colour takes part but joins nothing.
  EXPECT_EQ(c->split(-1, rank, "nobody"), nullptr);
  again->finalize(std::chrono::seconds(60));
  half->finalize(std::chrono::seconds(60));
  c.finalize();
}

TEST(NcclCommunicator, WaitsForTheCallersStream) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int size = c->size();
  // 16 Mi elements scaled 41 times on the caller's (default) stream, then
  // reduced at once: the communicator's own stream must wait for the scaling.
  const std::int64_t n = std::int64_t(1) << 24;
  Tensor x = Tensor::empty({n}, DType::kF32, c->device());
  x.fill_(1.f);
  for (int i = 0; i < 20; ++i) {
    ops::scale(x, 2.f);
    ops::scale(x, 0.5f);
  }
  ops::scale(x, 3.f);
  Tensor out = Tensor::empty({n}, DType::kF32, c->device());
  c->all_reduce(x, out, ReduceOp::kSum)->wait();
  const std::vector<float> got = values(out);
  std::int64_t wrong = 0;
  for (float v : got) wrong += v != 3.f * float(size);
  EXPECT_EQ(wrong, 0) << "elements reduced before the caller's kernels wrote them";
  c.finalize();
}

TEST(NcclCommunicator, RejectsBadArguments) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  const int size = c->size();
  const Device dev = c->device();
  Tensor a = device_tensor(contribution(8, 0), DType::kF32, dev);
  Tensor b = sentinel_tensor(8, DType::kF32, dev);
  Tensor host = Tensor::zeros({8}, DType::kF32);
  Tensor short_out = sentinel_tensor(7, DType::kF32, dev);
  Tensor half = sentinel_tensor(8, DType::kF16, dev);
  Tensor ints = device_tensor(contribution(8, 0), DType::kI32, dev);

  EXPECT_TRUE(throws_error([&] { c->all_reduce(host, b, ReduceOp::kSum); }, ErrorKind::kDeviceMismatch,
                           {"all_reduce", "'world'", "cpu"}));
  EXPECT_TRUE(throws_error([&] { c->all_reduce(a, short_out, ReduceOp::kSum); }, ErrorKind::kShapeMismatch,
                           {"all_reduce", "8", "7"}));
  EXPECT_TRUE(throws_error([&] { c->all_reduce(a, half, ReduceOp::kSum); }, ErrorKind::kDTypeMismatch, {"f32", "f16"}));
  EXPECT_TRUE(
      throws_error([&] { c->all_reduce(ints, ints, ReduceOp::kAvg); }, ErrorKind::kNotSupported, {"avg of i32"}));
  EXPECT_TRUE(throws_error([&] { c->broadcast(a, size); }, ErrorKind::kOutOfRange, {"root", std::to_string(size)}));
  EXPECT_TRUE(throws_error([&] { c->reduce(a, b, ReduceOp::kSum, -1); }, ErrorKind::kOutOfRange, {"root"}));
  EXPECT_TRUE(throws_error([&] { c->send_recv(a, size, b, 0); }, ErrorKind::kOutOfRange, {"dst"}));
  Tensor reduce_in = sentinel_tensor(std::int64_t(size) * 8 + 1, DType::kF32, dev);
  EXPECT_TRUE(throws_error([&] { c->reduce_scatter(reduce_in, b, ReduceOp::kSum); }, ErrorKind::kShapeMismatch,
                           {"reduce_scatter"}));
  Tensor gather_out = sentinel_tensor(std::int64_t(size) * 8 + 1, DType::kF32, dev);
  EXPECT_TRUE(throws_error([&] { c->all_gather(a, gather_out); }, ErrorKind::kShapeMismatch, {"all_gather"}));
  // Overlapping, but not in NCCL's in-place layout.
  Tensor buffer = sentinel_tensor(16, DType::kF32, dev);
  Tensor first = buffer.slice(0, 10), second = buffer.slice(5, 15);
  EXPECT_TRUE(
      throws_error([&] { c->all_reduce(first, second, ReduceOp::kSum); }, ErrorKind::kInvalidArgument, {"overlap"}));
  EXPECT_TRUE(throws_error([&] { c->send_recv(first, 0, second, 0); }, ErrorKind::kInvalidArgument, {"overlap"}));

  // Rejected calls leave the group in step: it still works.
  c->all_reduce(a, b, ReduceOp::kSum)->wait();
  EXPECT_TRUE(all_equal(values(b), reduced(8, ReduceOp::kSum, size)));
  c.finalize();
}

TEST(NcclCommunicator, FinalizeAndAbortEndTheCommunicator) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Comms c = make_comms();
  Tensor x = device_tensor(contribution(4, c->rank()), DType::kF32, c->device());
  WorkPtr pending = c->all_reduce(x, x, ReduceOp::kMax);
  c->finalize(std::chrono::seconds(60));  // waits for `pending`
  EXPECT_TRUE(pending->test());
  pending->wait();
  c->finalize(std::chrono::seconds(60));  // idempotent
  EXPECT_THROW(c->barrier(), CommError);

  std::unique_ptr<Communicator> second = make_nccl_world(*c.host, c.host->rank() % cuda_device_count());
  second->barrier()->wait();
  second->abort();
  second->abort();  // idempotent, never throws
  EXPECT_TRUE(throws_error([&] { second->all_reduce(x, x, ReduceOp::kSum); }, ErrorKind::kComm, {"aborted"}));
  EXPECT_THROW(second->split(0, 0, "late"), CommError);
  EXPECT_THROW(second->finalize(std::chrono::seconds(1)), CommError);
  c.host->finalize(std::chrono::seconds(60));
}

TEST(NcclCommunicator, DebugModeAcceptsMatchingCalls) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  CommOptions options;
  options.debug = true;
  Comms c = make_comms(options);
  const int rank = c->rank(), size = c->size();
  Tensor in = device_tensor(contribution(10, rank), DType::kBF16, c->device());
  Tensor out = sentinel_tensor(10, DType::kBF16, c->device());
  c->all_reduce(in, out, ReduceOp::kSum)->wait();
  EXPECT_TRUE(all_equal(values(out), reduced(10, ReduceOp::kSum, size)));
  c->broadcast(out, 0)->wait();
  c->barrier()->wait();
  std::unique_ptr<Communicator> child = c->split(0, rank, "debug.child");
  child->barrier()->wait();
  child->finalize(std::chrono::seconds(60));
  c.finalize();
}

TEST(NcclCommunicator, DeadlineAbortsAndDumpsTheFlightRecorder) {
  if (ht::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  namespace fs = std::filesystem;
  const fs::path run_dir = fs::temp_directory_path() / ("ht_nccl_test_" + std::to_string(getpid()));
  CommOptions options;
  options.timeout = std::chrono::seconds(3);
  options.run_dir = run_dir.string();
  Comms c = make_comms(options);
  const int rank = c->rank();
  const Device dev = c->device();

  // Keep the caller's stream busy for about 9 s with GEMMs (timed on one
  // after a warm-up), so that an all_reduce queued behind them misses its
  // 3 s deadline. 8192^3 on a GPU; where a GEMM of 2048^3 already takes a
  // twentieth of a second (the emulated device runs it on the CPU, where
  // 8192^3 took 30 s and the test neared its 120 s hang guard), that size.
  const auto timed_gemm = [](Tensor& a, Tensor& g) {
    ops::matmul(a, a, g);
    (void)g.item(0);  // synchronises
    const auto t0 = std::chrono::steady_clock::now();
    ops::matmul(a, a, g);
    (void)g.item(0);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::int64_t m = 2048;
  Tensor a = Tensor::zeros({m, m}, DType::kF32, dev);
  Tensor g = Tensor::empty({m, m}, DType::kF32, dev);
  double gemm_s = timed_gemm(a, g);
  if (gemm_s < 0.05) {
    m = 8192;
    a = Tensor::zeros({m, m}, DType::kF32, dev);
    g = Tensor::empty({m, m}, DType::kF32, dev);
    gemm_s = timed_gemm(a, g);
  }
  const int reps = int(std::min(3000.0, std::ceil(9.0 / std::max(gemm_s, 1e-4))));
  for (int i = 0; i < reps; ++i) ops::matmul(a, a, g);

  Tensor x = device_tensor(contribution(16, rank), DType::kF32, dev);
  const auto start = std::chrono::steady_clock::now();
  WorkPtr late = c->all_reduce(x, x, ReduceOp::kSum);
  try {
    late->wait();
    ADD_FAILURE() << "an all_reduce behind " << reps << " GEMMs of " << gemm_s << " s met a 3 s deadline";
  } catch (const CommTimeout& e) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 3.0);
    EXPECT_NE(e.message().find("all_reduce"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("'world'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("16 x f32"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("NCCL cannot report which ranks arrived"), std::string::npos) << e.message();
    EXPECT_EQ(e.arrived(), std::vector<int>{rank});
    EXPECT_EQ(e.missing().size(), std::size_t(c->size() - 1));
  }
  EXPECT_TRUE(fs::exists(run_dir / ("flight_recorder_rank" + std::to_string(c.host->rank()) + ".json")));
  // Aborted: every later call fails, and so does the Work again.
  EXPECT_TRUE(throws_error([&] { c->barrier(); }, ErrorKind::kComm, {"aborted"}));
  EXPECT_THROW(late->wait(), CommError);
  (void)g.item(0);  // let the GEMMs drain before their buffers are freed
  c.host->finalize(std::chrono::seconds(60));
  fs::remove_all(run_dir);
}

}  // namespace
}  // namespace ht::comm
