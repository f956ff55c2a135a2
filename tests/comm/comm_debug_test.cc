// Debug mode (CommOptions::debug, HT_COMM_DEBUG=1) under mpirun: matching
// collectives pass the check; ranks that call different collectives get a
// CommError naming each rank's call, promptly and on every rank, instead of
// a hang or a buffer overrun.
#include <chrono>

#include "ht/comm/mpi_communicator.h"
#include "ht/comm/work.h"
#include "test_util.h"

namespace ht::comm {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Communicator> debug_world() {
  CommOptions options;
  options.debug = true;
  options.timeout = 20s;
  return make_mpi_world(options);
}

TEST(CommDebug, MatchingCallsPassTheCheck) {
  auto world = debug_world();
  const int size = world->size();
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  world->all_reduce(x, x, ReduceOp::kSum)->wait();
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{float(size), 2.f * size, 3.f * size}));
  Tensor all = Tensor::zeros({3 * size}, DType::kF32);
  world->all_gather(x, all)->wait();
  world->broadcast(x, size - 1)->wait();
  world->barrier()->wait();
  auto group = world->split(0, world->rank(), "debug.split");  // split is checked too
  group->barrier()->wait();
  group->finalize(10s);
  world->finalize(10s);
}

TEST(CommDebug, DifferentCollectivesAreReportedNotHung) {
  auto world = debug_world();
  const int rank = world->rank(), size = world->size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  Tensor x = Tensor::zeros({1000}, DType::kF32);
  Tensor all = Tensor::zeros({1000 * size}, DType::kF32);
  world->barrier()->wait();  // #1 matches
  const auto t0 = std::chrono::steady_clock::now();
  WorkPtr w = rank == 0 ? world->all_reduce(x, x, ReduceOp::kSum) : world->all_gather(x, all);
  const std::string others = size == 2 ? "rank 1" : "ranks 1," + std::to_string(2) + (size > 3 ? ",3" : "");
  EXPECT_TRUE(test::throws_error([&] { w->wait(); }, ErrorKind::kComm,
                                 {others + " called all_gather(1000 x f32)",
                                  "where rank 0 called all_reduce(1000 x f32, sum)", "#2 on 'world'"}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "the mismatch took as long as a timeout";
  // The communicator is unusable afterwards; a new one works.
  EXPECT_THROW(world->barrier(), CommError);
  world->finalize(1s);
  auto fresh = make_mpi_world({});
  fresh->barrier()->wait();
  fresh->finalize(10s);
}

TEST(CommDebug, DifferentCountsAreReported) {
  auto world = debug_world();
  const int rank = world->rank(), size = world->size();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  Tensor x = Tensor::zeros({rank == size - 1 ? 7 : 8}, DType::kI32);
  WorkPtr w = world->all_reduce(x, x, ReduceOp::kMax);
  EXPECT_TRUE(test::throws_error([&] { w->wait(); }, ErrorKind::kComm,
                                 {"rank " + std::to_string(size - 1) + " called all_reduce(7 x i32, max)",
                                  "called all_reduce(8 x i32, max)", "#1 on 'world'"}));
  world->finalize(1s);
}

}  // namespace
}  // namespace ht::comm
