// parallel::Layout as a value: its name and compact form, every rule of
// layout_problem in the flags' words, resolving dp on a world or a mesh, and
// the one stage split of the engine and the planner.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ht/parallel/layout.h"
#include "test_util.h"

namespace ht::parallel {
namespace {

using test::throws_error;

TEST(Layout, NamesItselfFromItsFields) {
  EXPECT_EQ((Layout{.tp = 2, .pp = 2, .dp = 2, .zero = 1}).name(), "zero1_dp2_tp2_pp2_1f1b");
  EXPECT_EQ((Layout{.dp = 4}).name(), "zero0_dp4_tp1_pp1_1f1b");
  EXPECT_EQ((Layout{.dp = 4, .ep = 2, .zero = 3}).name(), "zero3_dp4_tp1_ep2_pp1_1f1b");
  EXPECT_EQ((Layout{.dp = 4, .ep = 2, .zero = 3}).str(), "tp1 pp1 dp4 ep2 zero3 mb1x1");
  EXPECT_EQ((Layout{.pp = 2, .dp = 4, .zero = 2, .shard_group = 2, .micro_batch = 4, .grad_accum = 4,
                    .schedule = Schedule::kInterleaved, .virtual_stages = 2, .stage_layers = {1, 2, 2, 1}})
                .name(),
            "zero2_sg2_dp4_tp1_pp2_interleaved_v2_mb4_acc4_stages1_2_2_1");
  EXPECT_EQ((Layout{.pp = 2, .dp = 1, .schedule = Schedule::kZeroBubbleH1}).name(), "zero0_dp1_tp1_pp2_zbh1");
  EXPECT_EQ((Layout{.pp = 2, .dp = 1, .schedule = Schedule::kGPipe}).name(), "zero0_dp1_tp1_pp2_gpipe");
}

TEST(Layout, DistinctLayoutsHaveDistinctNames) {
  std::set<std::string> names;
  int count = 0;
  for (int tp : {1, 2})
    for (int pp : {1, 2, 4})
      for (int dp : {1, 2, 6})
        for (int zero : {0, 1, 3})
          for (int sg : {0, 2})
            for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kZeroBubbleH1})
              for (std::int64_t mb : {1, 12})
                for (int accum : {1, 12})
                  for (const std::vector<int>& split : {std::vector<int>{}, std::vector<int>{11, 1}}) {
                    const Layout l{.tp = tp, .pp = pp, .dp = dp, .zero = zero, .shard_group = sg, .micro_batch = mb,
                                   .grad_accum = accum, .schedule = s, .stage_layers = split};
                    names.insert(l.name());
                    ++count;
                    for (char c : l.name()) ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_');
                  }
  EXPECT_EQ(int(names.size()), count);  // mb 1 x accum 12 and mb 12 x accum 1 included
}

TEST(Layout, CompactFormForPeople) {
  EXPECT_EQ((Layout{.tp = 2, .pp = 2, .dp = 4, .zero = 1, .shard_group = 2, .micro_batch = 2, .grad_accum = 4,
                    .schedule = Schedule::kInterleaved, .virtual_stages = 2})
                .str(),
            "tp2 pp2 dp4 zero1/2 mb2x4 interleaved v2");
  EXPECT_EQ((Layout{.dp = 4, .zero = 3}).str(), "tp1 pp1 dp4 zero3 mb1x1");
  EXPECT_EQ((Layout{.tp = 2, .dp = 2, .cp = 4, .zero = 3}).str(), "tp2 cp4 pp1 dp2 zero3 mb1x1");
}

TEST(Layout, ContextParallelismTakesRanksAndShardsWithDp) {
  const Layout l{.tp = 2, .dp = 0, .cp = 2, .zero = 3};
  const Layout on8 = l.on_world(8);
  EXPECT_EQ(on8.dp, 2);
  EXPECT_EQ(on8.world(), 8);
  EXPECT_EQ(on8.shards(), 4);  // ZeRO shards over dp x cp: every rank holding the parameters
  EXPECT_EQ(on8.global_batch(), 2);  // rows: cp ranks share theirs
  EXPECT_EQ(on8.name(), "zero3_dp2_tp2_cp2_pp1_1f1b");
  EXPECT_NE(on8.name(), (Layout{.tp = 2, .dp = 4, .zero = 3}).name());
  EXPECT_TRUE(throws_error([] { Layout{.cp = 4}.on_world(6); }, ErrorKind::kConfig, {"--cp 4", "6 ranks"}));
  EXPECT_TRUE(throws_error([] { Layout{.tp = 1, .pp = 1, .cp = 2}.on_mesh(comm::MeshShape(4, 1, 1)); },
                           ErrorKind::kConfig, {"cp 2", "cp 1"}));
  EXPECT_NE(layout_problem(Layout{.cp = 0}), "");
  // A shard group divides dp x cp.
  EXPECT_EQ(layout_problem(Layout{.dp = 1, .cp = 4, .zero = 1, .shard_group = 2}), "");
}

TEST(Layout, SizesOfTheBatch) {
  const Layout l{.tp = 2, .pp = 2, .dp = 3, .zero = 1, .micro_batch = 4, .grad_accum = 5};
  EXPECT_EQ(l.world(), 12);
  EXPECT_EQ(l.global_batch(), 60);
  EXPECT_EQ(l.shards(), 3);
  EXPECT_EQ((Layout{.dp = 6, .zero = 2, .shard_group = 2}).shards(), 2);
  EXPECT_EQ((Layout{.dp = 6}).shards(), 1);
  EXPECT_EQ((Layout{.pp = 2, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 3}).model_stages(),
            6);
}

TEST(Layout, ProblemsInTheFlagsWords) {
  const auto says = [](const Layout& l, const std::string& want) {
    const std::string got = layout_problem(l);
    EXPECT_NE(got.find(want), std::string::npos) << "got: '" << got << "', want: '" << want << "'";
  };
  EXPECT_EQ(layout_problem(Layout{}), "");
  EXPECT_EQ(layout_problem(Layout{.pp = 4, .dp = 2, .zero = 2, .grad_accum = 8, .schedule = Schedule::kInterleaved,
                                  .virtual_stages = 2, .stage_layers = {1, 1, 1, 1, 1, 1, 1, 1}}),
            "");
  says(Layout{.tp = 0}, "--tp 0 and --pp 1");
  // Expert parallelism: a divisor of dp, without cp or a shard group.
  EXPECT_EQ(layout_problem(Layout{.dp = 4, .ep = 2, .zero = 3}), "");
  EXPECT_EQ(layout_problem(Layout{.ep = 2}), "") << "dp 0, not resolved yet: checked on the world";
  says(Layout{.ep = 0}, "--ep 0: the expert-parallel size is 1 or more");
  says(Layout{.dp = 6, .ep = 4}, "--ep 4 does not divide the 6 data-parallel ranks");
  says(Layout{.dp = 2, .cp = 2, .ep = 2}, "--ep 2 with --cp 2");
  says(Layout{.dp = 4, .ep = 2, .zero = 1, .shard_group = 2}, "--ep 2 with --zero-shard-group 2");
  EXPECT_TRUE(throws_error([] { Layout{.ep = 4}.on_world(6); }, ErrorKind::kConfig, {"--ep 4", "6 data-parallel"}));
  says(Layout{.dp = -1}, "dp -1");
  says(Layout{.micro_batch = 0}, "--micro-batch must be positive, got 0");
  says(Layout{.grad_accum = 0}, "--grad-accum must be positive, got 0");
  says(Layout{.zero = 4}, "--zero 4 must be 0 (DDP), 1, 2 or 3");
  says(Layout{.dp = 2, .zero = 4, .schedule = Schedule::kInterleaved, .virtual_stages = 2}, "--zero 4");
  says(Layout{.pp = 1, .schedule = Schedule::kInterleaved, .virtual_stages = 2}, "needs at least 2 pipeline ranks");
  says(Layout{.pp = 2, .virtual_stages = 2}, "--virtual-stages 2: model chunks per pipeline rank");
  says(Layout{.pp = 2, .dp = 2, .zero = 3, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2},
       "--zero 3 is not supported");
  says(Layout{.dp = 4, .shard_group = 2}, "--zero-shard-group 2 needs a ZeRO stage");
  says(Layout{.dp = 6, .zero = 1, .shard_group = 4}, "--zero-shard-group 4 must divide the data-parallel size 6");
  says(Layout{.pp = 2, .stage_layers = {3, 2, 1}}, "3");
  says(Layout{.pp = 2, .stage_layers = {3, 0}}, "0");
  // dp 0 (not resolved): any shard group may still divide it.
  EXPECT_EQ(layout_problem(Layout{.zero = 1, .shard_group = 4}), "");
}

TEST(Layout, OnAWorldResolvesDataParallelRanks) {
  const Layout l = Layout{.tp = 2, .pp = 2, .zero = 1}.on_world(16);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.name(), "zero1_dp4_tp2_pp2_1f1b");
  EXPECT_EQ((Layout{.tp = 2, .dp = 4}).on_world(8).dp, 4);
  EXPECT_TRUE(throws_error([] { Layout{.tp = 3}.on_world(8); }, ErrorKind::kConfig,
                           {"--tp 3 x --pp 1 does not divide the 8 ranks"}));
  EXPECT_TRUE(throws_error([] { Layout{.tp = 2, .dp = 2}.on_world(8); }, ErrorKind::kConfig,
                           {"has dp 2", "leave 4 data-parallel ranks of the 8"}));
  // Validated once resolved: a shard group that does not divide the dp found.
  EXPECT_TRUE(throws_error([] { Layout{.zero = 1, .shard_group = 4}.on_world(6); }, ErrorKind::kConfig,
                           {"--zero-shard-group 4 must divide the data-parallel size 6"}));
}

TEST(Layout, OnAMeshTakesItsSizes) {
  EXPECT_EQ((Layout{.tp = 2, .pp = 2}).on_mesh(comm::MeshShape(8, 2, 2)).dp, 2);
  EXPECT_TRUE(throws_error([] { Layout{.tp = 1, .pp = 2}.on_mesh(comm::MeshShape(8, 2, 2)); }, ErrorKind::kConfig,
                           {"has tp 1, pp 2 and cp 1", "the mesh it runs on has tp 2, pp 2 and cp 1"}));
}

TEST(Layout, OneStageSplit) {
  EXPECT_EQ((Layout{.pp = 3}).layers_per_stage(7), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ((Layout{.pp = 2, .stage_layers = {1, 4}}).layers_per_stage(5), (std::vector<int>{1, 4}));
  EXPECT_EQ((Layout{.pp = 2, .stage_layers = {1, 4}}).stage_boundaries(), (std::vector<int>{0, 1, 5}));
  EXPECT_TRUE(Layout{.pp = 2}.stage_boundaries().empty());
  EXPECT_TRUE(throws_error([] { Layout{.pp = 2, .stage_layers = {1, 4}}.layers_per_stage(6); }, ErrorKind::kConfig,
                           {"sums to 5 layers but the model has 6"}));
  EXPECT_TRUE(throws_error([] { Layout{.pp = 4}.layers_per_stage(3); }, ErrorKind::kConfig,
                           {"3 layers cannot fill 4 pipeline stages"}));
  // Interleaved: one count per virtual stage, pp x v of them.
  const Layout v{.pp = 2, .grad_accum = 2, .schedule = Schedule::kInterleaved, .virtual_stages = 2};
  EXPECT_EQ(v.layers_per_stage(6), (std::vector<int>{2, 2, 1, 1}));
}

}  // namespace
}  // namespace ht::parallel
