// The routing communicator under mpirun, with MPI standing in for both
// planes. In the first case the device plane is aborted before use, so any
// host tensor routed to it would throw: every collective completing with the
// right result shows that host tensors took the host plane. Splits keep both
// planes, a mesh over a routing world reduces over exactly its groups, and
// abort() reaches both planes. Device tensors (which need a GPU) are checked
// where one is present; without one those cases skip visibly.
#include <numeric>
#include <string>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/routing_communicator.h"
#include "ht/comm/work.h"
#include "comm/mpi_world.h"
#include "test_util.h"

namespace ht::comm {
namespace {

using namespace std::chrono_literals;

Communicator& world() { return test::mpi_world(); }

// A routing communicator over two copies of the world.
std::unique_ptr<Communicator> routed(const std::string& name) {
  auto host = world().split(0, world().rank(), name);
  auto device = world().split(0, world().rank(), name + ".device");
  return make_routing_communicator(std::move(host), std::move(device));
}

// The same, with a device plane that fails every call it is given.
std::unique_ptr<Communicator> routed_with_dead_device_plane(const std::string& name) {
  auto host = world().split(0, world().rank(), name);
  auto device = world().split(0, world().rank(), name + ".device");
  device->abort();
  return make_routing_communicator(std::move(host), std::move(device));
}

Tensor i32_tensor(const std::vector<std::int32_t>& v) { return Tensor::from_vector(v, {std::int64_t(v.size())}); }

TEST(RoutingCommunicator, HostTensorsTakeTheHostPlane) {
  auto comm = routed_with_dead_device_plane("routed");
  const int rank = comm->rank(), size = comm->size();
  EXPECT_EQ(rank, world().rank());
  EXPECT_EQ(size, world().size());
  EXPECT_EQ(comm->name(), "routed");

  Tensor x = i32_tensor({rank + 1});
  comm->all_reduce(x, x, ReduceOp::kSum)->wait();
  EXPECT_EQ(x.to_vector<std::int32_t>()[0], size * (size + 1) / 2);
  // On a host plane stream_wait() is wait(): the result is there when it returns.
  Tensor y = i32_tensor({rank + 1});
  comm->all_reduce(y, y, ReduceOp::kMax)->stream_wait();
  EXPECT_EQ(y.to_vector<std::int32_t>()[0], size);

  Tensor all = Tensor::zeros({size}, DType::kI32);
  comm->all_gather(i32_tensor({10 * rank}), all)->wait();
  for (int r = 0; r < size; ++r) EXPECT_EQ(all.to_vector<std::int32_t>()[std::size_t(r)], 10 * r);

  std::vector<std::int32_t> blocks(static_cast<std::size_t>(size));
  std::iota(blocks.begin(), blocks.end(), 100 * rank);  // block j from rank r: 100 r + j
  Tensor mine = Tensor::zeros({1}, DType::kI32);
  comm->reduce_scatter(i32_tensor(blocks), mine, ReduceOp::kSum)->wait();
  EXPECT_EQ(mine.to_vector<std::int32_t>()[0], 100 * size * (size - 1) / 2 + size * rank);

  Tensor b = i32_tensor({rank == size - 1 ? 77 : -1});
  comm->broadcast(b, size - 1)->wait();
  EXPECT_EQ(b.to_vector<std::int32_t>()[0], 77);

  // reduce's output is undefined off the root: it has no say in the plane.
  Tensor out = rank == 0 ? Tensor::zeros({1}, DType::kI32) : Tensor();
  comm->reduce(i32_tensor({rank}), out, ReduceOp::kMax, 0)->wait();
  if (rank == 0) EXPECT_EQ(out.to_vector<std::int32_t>()[0], size - 1);

  Tensor got = Tensor::zeros({size}, DType::kI32);
  std::vector<std::int32_t> to(static_cast<std::size_t>(size));
  for (int j = 0; j < size; ++j) to[std::size_t(j)] = 1000 * rank + j;
  comm->all_to_all(i32_tensor(to), got)->wait();
  for (int i = 0; i < size; ++i) EXPECT_EQ(got.to_vector<std::int32_t>()[std::size_t(i)], 1000 * i + rank);

  // A ring of send_recv, then paired send and recv.
  Tensor from_left = Tensor::zeros({1}, DType::kI32);
  comm->send_recv(i32_tensor({rank}), (rank + 1) % size, from_left, (rank + size - 1) % size)->wait();
  EXPECT_EQ(from_left.to_vector<std::int32_t>()[0], (rank + size - 1) % size);
  if (size >= 2 && rank < 2) {
    if (rank == 0) {
      comm->send(i32_tensor({5}), 1)->wait();
    } else {
      Tensor r = Tensor::zeros({1}, DType::kI32);
      comm->recv(r, 0)->wait();
      EXPECT_EQ(r.to_vector<std::int32_t>()[0], 5);
    }
  }
  comm->barrier()->wait();
  comm->finalize(30s);
}

TEST(RoutingCommunicator, SplitKeepsBothPlanes) {
  auto comm = routed("routed_split");
  const int rank = comm->rank();
  // Odd ranks join no group: nullptr, as from either plane alone.
  auto even = comm->split(rank % 2 == 0 ? 0 : -1, rank, "even");
  if (rank % 2 != 0) {
    EXPECT_EQ(even, nullptr);
  } else {
    ASSERT_NE(even, nullptr);
    EXPECT_EQ(even->name(), "even");
    EXPECT_EQ(even->rank(), rank / 2);
    Tensor x = i32_tensor({1});
    even->all_reduce(x, x, ReduceOp::kSum)->wait();
    EXPECT_EQ(x.to_vector<std::int32_t>()[0], (comm->size() + 1) / 2);
    // Aborting the split reaches its planes, not the parent's.
    even->abort();
    EXPECT_THROW(even->all_reduce(x, x, ReduceOp::kSum)->wait(), CommError);
  }
  Tensor y = i32_tensor({1});
  comm->all_reduce(y, y, ReduceOp::kSum)->wait();
  EXPECT_EQ(y.to_vector<std::int32_t>()[0], comm->size());
  comm->finalize(30s);
}

TEST(RoutingCommunicator, MeshOverARoutingWorld) {
  const int size = world().size(), rank = world().rank();
  const int tp = size % 2 == 0 ? 2 : 1;
  DeviceMesh mesh(routed("routed_world"), tp, 1);
  for (MeshAxis axis : {MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp}) {
    SCOPED_TRACE(axis_name(axis));
    const std::vector<int> members = mesh.group(axis);
    Tensor x = i32_tensor({rank});
    mesh.axis(axis).all_reduce(x, x, ReduceOp::kSum)->wait();
    EXPECT_EQ(x.to_vector<std::int32_t>()[0], std::accumulate(members.begin(), members.end(), 0));
  }
  mesh.finalize(30s);
}

// The planes' own threads count as the routing communicator's: a memory
// snapshot's exchange on a GPU run goes through one, and its copies are
// the host plane's communication thread's.
TEST(RoutingCommunicator, OwnThreadsCpuTimeIsThePlanes) {
  auto comm = routed("cpu_time");
  const int rank = comm->rank(), size = comm->size();
  const double before = comm->own_threads_cpu_ms();
  const std::int64_t n = std::int64_t(16) << 20;  // 64 MiB a transfer
  Tensor s = Tensor::from_vector(std::vector<float>(std::size_t(n), float(rank)), {n});
  Tensor r = Tensor::zeros({n}, DType::kF32);
  for (int k = 0; k < 4; ++k) comm->send_recv(s, (rank + 1) % size, r, (rank + size - 1) % size)->wait();
  EXPECT_GT(comm->own_threads_cpu_ms(), before + 1.0) << "the host plane's transfers did not count";
}

TEST(RoutingCommunicator, AbortReachesTheHostPlane) {
  auto comm = routed_with_dead_device_plane("routed_abort");
  comm->abort();
  Tensor x = i32_tensor({1});
  EXPECT_THROW(comm->all_reduce(x, x, ReduceOp::kSum)->wait(), CommError);
}

TEST(RoutingCommunicator, PlanesMustSpanTheSameRanks) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks";
  auto host = world().split(0, world().rank(), "host");
  auto alone = world().split(world().rank(), 0, "alone");  // one rank each
  try {
    make_routing_communicator(std::move(host), std::move(alone));
    FAIL() << "planes of different sizes were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("must span the same ranks"), std::string::npos) << e.message();
  }
}

TEST(RoutingCommunicator, MixedDevicesInOneCallAreRefused) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "needs a CUDA device for a device tensor";
  auto comm = routed_with_dead_device_plane("routed_mixed");
  Tensor host = i32_tensor({1});
  Tensor device = host.to(Device::cuda(0));
  try {
    comm->all_reduce(host, device, ReduceOp::kSum);
    FAIL() << "a call with a host and a device tensor was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceMismatch);
    EXPECT_NE(e.message().find("not both"), std::string::npos) << e.message();
  }
  // A device tensor goes to the (dead) device plane.
  EXPECT_THROW(comm->all_reduce(device, device, ReduceOp::kSum)->wait(), CommError);
  comm->finalize(30s);
}

}  // namespace
}  // namespace ht::comm
