// DeviceMesh under mpirun: every axis communicator holds the ranks MeshShape
// says, in coordinate order, under the right name, and reduces over exactly
// them; a tp x pp that does not divide the world is a clear start-up error.
// Expected values come from the layout and the world size, never assumed.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/work.h"
#include "comm/mpi_world.h"
#include "test_util.h"

namespace ht::comm {
namespace {

using namespace std::chrono_literals;

Communicator& world() { return test::mpi_world(); }

// A mesh owns its world, so each test hands it a copy of the test's world.
std::unique_ptr<Communicator> world_copy(const std::string& name) { return world().split(0, world().rank(), name); }

Tensor i32_tensor(const std::vector<std::int32_t>& v) {
  return Tensor::from_vector(v, {std::int64_t(v.size())});
}

void check_mesh(int tp, int pp, int cp = 1) {
  const int rank = world().rank(), size = world().size();
  DeviceMesh mesh(world_copy("mesh_world"), tp, pp, cp);
  const MeshShape& shape = mesh.shape();
  EXPECT_EQ(shape.tp_size(), tp);
  EXPECT_EQ(shape.pp_size(), pp);
  EXPECT_EQ(shape.cp_size(), cp);
  EXPECT_EQ(shape.dp_size(), size / (tp * pp * cp));
  EXPECT_EQ(mesh.rank(), rank);
  EXPECT_EQ(mesh.world().size(), size);
  EXPECT_EQ(mesh.coord(), shape.coord(rank));
  EXPECT_EQ(&mesh.axis(MeshAxis::kTp), &mesh.tp_group());
  EXPECT_EQ(&mesh.axis(MeshAxis::kDp), &mesh.dp_group());
  EXPECT_EQ(&mesh.axis(MeshAxis::kPp), &mesh.pp_group());
  EXPECT_EQ(&mesh.axis(MeshAxis::kCp), &mesh.cp_group());
  EXPECT_EQ(&mesh.axis(MeshAxis::kDpCp), &mesh.dp_cp_group());
  // Without cp the dp group is the dp x cp group: no second split.
  if (cp == 1) EXPECT_EQ(&mesh.dp_cp_group(), &mesh.dp_group());

  const MeshCoord c = shape.coord(rank);
  for (MeshAxis axis : {MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kCp, MeshAxis::kDpCp}) {
    if (axis == MeshAxis::kDpCp && cp == 1) continue;  // the dp group, checked as kDp
    SCOPED_TRACE(axis_name(axis));
    Communicator& group = mesh.axis(axis);
    const std::vector<int> members = shape.group(rank, axis);
    EXPECT_EQ(mesh.group(axis), members);
    EXPECT_EQ(group.name(), axis_name(axis) + "." + std::to_string(shape.group_index(rank, axis)));
    EXPECT_EQ(group.size(), shape.size(axis));
    EXPECT_EQ(group.rank(), shape.coordinate(c, axis));

    // Each rank contributes its world rank (and a multiple): the sums are the group's.
    Tensor x = i32_tensor({rank, 100 * rank + 1});
    group.all_reduce(x, x, ReduceOp::kSum)->wait();
    const int sum = std::accumulate(members.begin(), members.end(), 0);
    EXPECT_EQ(x.to_vector<std::int32_t>(), (std::vector<std::int32_t>{sum, 100 * sum + int(members.size())}));

    // And an all-gather returns the members in coordinate order.
    Tensor all = Tensor::zeros({std::int64_t(group.size())}, DType::kI32);
    group.all_gather(i32_tensor({rank}), all)->wait();
    EXPECT_EQ(all.to_vector<std::int32_t>(), std::vector<std::int32_t>(members.begin(), members.end()));
  }
  mesh.finalize(30s);
}

// np 4: tp 2 x dp 2; np 8: tp 2 x dp 4.
TEST(DeviceMesh, TpTimesDp) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  check_mesh(/*tp=*/2, /*pp=*/1);
}

// np 4: cp 2 x dp 2; np 8: tp 2 x cp 2 x dp 2.
TEST(DeviceMesh, ContextParallel) {
  if (world().size() % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  check_mesh(/*tp=*/world().size() / 4, /*pp=*/1, /*cp=*/2);
}

// np 4: tp 2 x pp 2 (dp 1); np 8: the 2 x 2 x 2 mesh.
TEST(DeviceMesh, TpDpPp) {
  if (world().size() % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  check_mesh(/*tp=*/2, /*pp=*/2);
}

// Pipeline only (dp and tp of size 1 still have their one-rank communicators).
TEST(DeviceMesh, PipelineOnly) { check_mesh(/*tp=*/1, /*pp=*/world().size()); }

// tp 3 divides neither 4 nor 8: every rank refuses at once, before any
// communication, with the sizes and the valid choices in the message.
TEST(DeviceMesh, SizesThatDoNotDivideAreAConfigError) {
  const int size = world().size();
  if (size % 3 == 0) GTEST_SKIP() << "3 divides the world size";
  try {
    DeviceMesh mesh(world_copy("bad_mesh_world"), /*tp=*/3, /*pp=*/1);
    FAIL() << "a tp=3 mesh over " << size << " ranks was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    const std::string msg = e.message();
    for (const std::string& needle : {std::string("cannot build the device mesh (tp=3, pp=1)"), std::string("tp=3"),
                                      "does not divide the world size " + std::to_string(size), std::string("tp2xpp1")})
      EXPECT_NE(msg.find(needle), std::string::npos) << "message lacks '" << needle << "': " << msg;
  }
  // The world of the test is untouched and still works.
  Tensor x = i32_tensor({1});
  world().all_reduce(x, x, ReduceOp::kSum)->wait();
  EXPECT_EQ(x.to_vector<std::int32_t>(), std::vector<std::int32_t>{size});
}

TEST(DeviceMesh, NullWorldIsRejected) {
  try {
    DeviceMesh mesh(nullptr, 1, 1);
    FAIL() << "a mesh without a world was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ht::comm
