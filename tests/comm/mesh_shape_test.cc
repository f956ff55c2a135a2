// MeshShape, exhaustively: every rank of every layout up to 16 ranks.
#include <gtest/gtest.h>

#include <set>

#include "ht/comm/mesh_shape.h"
#include "test_util.h"

namespace ht::comm {
namespace {

TEST(MeshShape, WorkedExampleFromTheHeader) {
  const MeshShape m(8, 2, 2);
  EXPECT_EQ(m.dp_size(), 2);
  EXPECT_EQ(m.coord(5), (MeshCoord{1, 0, 1}));
  EXPECT_EQ(m.group(5, MeshAxis::kTp), (std::vector<int>{4, 5}));
  EXPECT_EQ(m.group(5, MeshAxis::kDp), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group(5, MeshAxis::kPp), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.str(), "pp2 x dp2 x tp2");
}

TEST(MeshShape, EveryLayoutPartitionsTheWorldAlongEachAxis) {
  for (int world = 1; world <= 16; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; tp * pp <= world; ++pp) {
        if (world % (tp * pp) != 0) continue;
        const MeshShape m(world, tp, pp);
        EXPECT_EQ(m.tp_size() * m.dp_size() * m.pp_size(), world);
        for (MeshAxis axis : {MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp}) {
          std::set<int> covered;
          std::set<int> colours;
          for (int r = 0; r < world; ++r) {
            EXPECT_EQ(m.rank(m.coord(r)), r);
            const auto g = m.group(r, axis);
            ASSERT_EQ(int(g.size()), m.size(axis));
            EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
            colours.insert(m.group_index(r, axis));
            for (int q : g) {
              EXPECT_EQ(m.group(q, axis), g) << "groups must agree between members";
              EXPECT_EQ(m.group_index(q, axis), m.group_index(r, axis));
            }
            covered.insert(g.begin(), g.end());
          }
          EXPECT_EQ(int(covered.size()), world);
          EXPECT_EQ(int(colours.size()), world / m.size(axis));
        }
        // tp groups are runs of consecutive ranks.
        for (int r = 0; r < world; ++r) {
          const auto g = m.group(r, MeshAxis::kTp);
          for (std::size_t i = 1; i < g.size(); ++i) EXPECT_EQ(g[i], g[i - 1] + 1);
        }
      }
}

TEST(MeshShape, ContextParallelSitsBetweenTpAndDp) {
  // world 16, tp 2, cp 2, pp 2: dp 2; rank 13 = tp 1, cp 0, dp 1, pp 1.
  const MeshShape m(16, 2, 2, 2);
  EXPECT_EQ(m.dp_size(), 2);
  EXPECT_EQ(m.cp_size(), 2);
  EXPECT_EQ(m.coord(13), (MeshCoord{.tp_rank = 1, .dp_rank = 1, .pp_rank = 1, .cp_rank = 0}));
  EXPECT_EQ(m.group(13, MeshAxis::kCp), (std::vector<int>{13, 15}));
  EXPECT_EQ(m.group(13, MeshAxis::kDp), (std::vector<int>{9, 13}));
  EXPECT_EQ(m.group(13, MeshAxis::kDpCp), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(m.dp_cp_rank(m.coord(13)), 2);
  EXPECT_EQ(m.size(MeshAxis::kDpCp), 4);
  EXPECT_EQ(m.str(), "pp2 x dp2 x cp2 x tp2");
}

TEST(MeshShape, EveryLayoutWithContextParallelismPartitionsTheWorld) {
  const std::vector<MeshAxis> axes{MeshAxis::kTp, MeshAxis::kCp, MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kDpCp};
  for (int world = 1; world <= 16; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; tp * pp <= world; ++pp)
        for (int cp = 1; tp * pp * cp <= world; ++cp) {
          if (world % (tp * pp * cp) != 0) continue;
          const MeshShape m(world, tp, pp, cp);
          EXPECT_EQ(m.tp_size() * m.cp_size() * m.dp_size() * m.pp_size(), world);
          for (MeshAxis axis : axes) {
            std::set<int> covered, colours;
            for (int r = 0; r < world; ++r) {
              EXPECT_EQ(m.rank(m.coord(r)), r);
              const auto g = m.group(r, axis);
              ASSERT_EQ(int(g.size()), m.size(axis));
              // A rank's place in its group is its coordinate along the axis.
              ASSERT_LT(m.coordinate(m.coord(r), axis), int(g.size()));
              EXPECT_EQ(g[std::size_t(m.coordinate(m.coord(r), axis))], r);
              colours.insert(m.group_index(r, axis));
              for (int q : g) EXPECT_EQ(m.group_index(q, axis), m.group_index(r, axis));
              covered.insert(g.begin(), g.end());
            }
            EXPECT_EQ(int(covered.size()), world);
            EXPECT_EQ(int(colours.size()), world / m.size(axis)) << axis_name(axis);
          }
          // dp x cp: the ranks of one tp and pp coordinate, which hold the same parameters.
          for (int r = 0; r < world; ++r)
            for (int q : m.group(r, MeshAxis::kDpCp)) {
              EXPECT_EQ(m.coord(q).tp_rank, m.coord(r).tp_rank);
              EXPECT_EQ(m.coord(q).pp_rank, m.coord(r).pp_rank);
            }
        }
}

TEST(MeshShape, SizesThatDoNotDivideAreAClearError) {
  EXPECT_TRUE(test::throws_error([] { MeshShape(6, 4, 1); }, ErrorKind::kConfig,
                                 {"tp=4 x pp=1 = 4 does not divide the world size 6", "tp2xpp1", "tp3xpp2"}));
  EXPECT_TRUE(test::throws_error([] { MeshShape(4, 0, 1); }, ErrorKind::kConfig, {"positive"}));
  EXPECT_TRUE(test::throws_error([] { MeshShape(6, 1, 1, 4); }, ErrorKind::kConfig,
                                 {"x cp=4 = 4 does not divide the world size 6"}));
}

}  // namespace
}  // namespace ht::comm
