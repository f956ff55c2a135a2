// The parallel layouts, exhaustively and without a communicator: buckets
// against a copy of DataParallel's rule, every element of every shard piece,
// hybrid groups for every dp <= 16, stage partitions against stage_blocks and
// against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "ht/parallel/tables.h"
#include "test_util.h"

namespace ht::parallel {
namespace {

// ---- buckets ------------------------------------------------------------------

TEST(Buckets, WorkedExampleFromTheHeader) {
  const std::vector<std::int64_t> numels{30, 50, 20, 7, 3};
  const std::vector<bool> tied{false, true, false, false, false};
  const std::vector<ParamGroup> g = assign_buckets(numels, 4, 200, tied);
  EXPECT_EQ(g, (std::vector<ParamGroup>{{{1}, true}, {{4, 3, 2, 0}, false}}));
}

// DataParallel::build_groups (stages 0-2) at d69d5a5, over stand-ins for the
// parameters: the rule as written there, to compare the pure function with.
struct FakeParam {
  std::int64_t numel;
  bool tied;
};

std::vector<ParamGroup> build_groups_today(const std::vector<FakeParam>& all, std::int64_t bucket_bytes,
                                           std::int64_t element_bytes) {
  std::vector<const FakeParam*> params;
  for (const FakeParam& p : all) params.push_back(&p);
  std::vector<std::vector<const FakeParam*>> members;
  std::vector<bool> deferred;
  std::vector<const FakeParam*> bucket;
  std::int64_t bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const FakeParam* p = *it;
    if (p->tied) {
      members.push_back({p});
      deferred.push_back(true);
      continue;
    }
    bucket.push_back(p);
    bytes += p->numel * element_bytes;
    if (bytes >= bucket_bytes) {
      members.push_back(std::move(bucket));
      deferred.push_back(false);
      bucket.clear();
      bytes = 0;
    }
  }
  if (!bucket.empty()) {
    members.push_back(std::move(bucket));
    deferred.push_back(false);
  }
  std::vector<ParamGroup> out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    ParamGroup g{{}, deferred[i]};
    for (const FakeParam* p : members[i]) g.params.push_back(int(p - all.data()));
    out.push_back(g);
  }
  return out;
}

// bench/parallel_bench.cc's ddp_bucket_numels at d69d5a5 (no tied weights).
std::vector<std::int64_t> bench_bucket_numels_today(const std::vector<std::int64_t>& numels,
                                                    std::int64_t bucket_bytes) {
  std::vector<std::int64_t> buckets;
  std::int64_t numel = 0;
  for (auto it = numels.rbegin(); it != numels.rend(); ++it) {
    numel += *it;
    if (numel * std::int64_t(sizeof(float)) >= bucket_bytes) {
      buckets.push_back(numel);
      numel = 0;
    }
  }
  if (numel > 0) buckets.push_back(numel);
  return buckets;
}

std::int64_t random_numel(std::mt19937& rng) {
  switch (rng() % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return std::int64_t(rng() % 17);
    case 3: return std::int64_t(rng() % 1000);
    case 4: return std::int64_t(rng() % 100000);
    default: return std::int64_t(rng() % 3000000);
  }
}

TEST(Buckets, SameGroupsInTheSameOrderAsBuildGroupsToday) {
  std::mt19937 rng(1234);
  const std::int64_t bucket_sizes[] = {1, 3, 4, 7, 64, 1000, 4096, 100003, std::int64_t(1) << 20,
                                       std::int64_t(25) << 20, std::int64_t(1) << 62};
  int cases = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = int(rng() % 41);
    std::vector<FakeParam> fake;
    std::vector<std::int64_t> numels;
    std::vector<bool> tied;
    const int tie_odds = int(rng() % 4);  // 0: none tied
    for (int i = 0; i < n; ++i) {
      const std::int64_t numel = random_numel(rng);
      const bool t = tie_odds > 0 && rng() % (8 / tie_odds) == 0;
      fake.push_back({numel, t});
      numels.push_back(numel);
      tied.push_back(t);
    }
    for (std::int64_t bucket_bytes : bucket_sizes)
      for (std::int64_t element_bytes : {1, 2, 4}) {
        ++cases;
        const std::vector<ParamGroup> got = assign_buckets(numels, element_bytes, bucket_bytes, tied);
        ASSERT_EQ(got, build_groups_today(fake, bucket_bytes, element_bytes))
            << "n " << n << " bucket_bytes " << bucket_bytes << " element_bytes " << element_bytes;
        // A partition of the parameters; deferred exactly for the tied, alone.
        std::vector<int> seen(std::size_t(n), 0);
        for (const ParamGroup& g : got) {
          ASSERT_FALSE(g.params.empty());
          for (int i : g.params) ++seen[std::size_t(i)];
          if (g.deferred) {
            ASSERT_EQ(g.params.size(), 1u);
            EXPECT_TRUE(tied[std::size_t(g.params[0])]);
          } else {
            for (int i : g.params) EXPECT_FALSE(tied[std::size_t(i)]);
          }
        }
        for (int c : seen) EXPECT_EQ(c, 1);
        // Without isolation (pp = 1) the group sizes are the benchmark's buckets
        // (except trailing empty parameters, which it drops and DataParallel keeps).
        if (element_bytes == 4) {
          std::vector<std::int64_t> sizes;
          for (const ParamGroup& g : assign_buckets(numels, 4, bucket_bytes)) {
            std::int64_t s = 0;
            for (int i : g.params) s += numels[std::size_t(i)];
            sizes.push_back(s);
          }
          if (!sizes.empty() && sizes.back() == 0) sizes.pop_back();
          EXPECT_EQ(sizes, bench_bucket_numels_today(numels, bucket_bytes));
        }
      }
  }
  EXPECT_GT(cases, 10000);
}

TEST(Buckets, EdgeCases) {
  EXPECT_TRUE(assign_buckets({}, 4, 100).empty());
  const std::vector<std::int64_t> zeros{0, 0, 0};
  EXPECT_EQ(assign_buckets(zeros, 4, 1), (std::vector<ParamGroup>{{{2, 1, 0}, false}}));
  const std::vector<std::int64_t> ones{1, 1, 1};
  EXPECT_EQ(assign_buckets(ones, 4, 1), (std::vector<ParamGroup>{{{2}, false}, {{1}, false}, {{0}, false}}));
  EXPECT_EQ(assign_buckets(ones, 4, 8), (std::vector<ParamGroup>{{{2, 1}, false}, {{0}, false}}));
  EXPECT_EQ(assign_buckets(ones, 4, 1, {true, true, true}),
            (std::vector<ParamGroup>{{{2}, true}, {{1}, true}, {{0}, true}}));
}

TEST(Buckets, BadInputsAreClearErrors) {
  const std::vector<std::int64_t> n{1, 2};
  EXPECT_TRUE(test::throws_error([&] { assign_buckets(n, 4, 0); }, ErrorKind::kConfig,
                                 {"bucket size must be positive, got 0 bytes"}));
  EXPECT_TRUE(test::throws_error([&] { assign_buckets(n, 0, 10); }, ErrorKind::kInvalidArgument, {"element size"}));
  EXPECT_TRUE(test::throws_error([&] { assign_buckets(n, 4, 10, {true}); }, ErrorKind::kInvalidArgument,
                                 {"1 isolation flags for 2 parameters"}));
  const std::vector<std::int64_t> neg{1, -2};
  EXPECT_TRUE(test::throws_error([&] { assign_buckets(neg, 4, 10); }, ErrorKind::kInvalidArgument,
                                 {"-2 of parameter 1 is negative"}));
}

// ---- ZeRO-3 units -------------------------------------------------------------

TEST(Units, GptLikeModelWithTheHeadTiedToTheEmbedding) {
  // wte 0, wpe 1; two blocks of two parameters; ln_f 6, 7; the head reuses wte.
  const std::vector<std::vector<int>> modules{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0}};
  const UnitAssignment a = assign_units(modules);
  EXPECT_EQ(a.units, (std::vector<ParamGroup>{{{0, 1}, false}, {{2, 3}, false}, {{4, 5}, false}, {{6, 7}, false}}));
  EXPECT_EQ(a.unit_of_module, (std::vector<int>{0, 1, 2, 3, 0}));
  // On the first of several stages wte is tied across stages: its unit is deferred.
  std::vector<bool> tied(8, false);
  tied[0] = true;
  const UnitAssignment b = assign_units(modules, tied);
  EXPECT_TRUE(b.units[0].deferred);
  EXPECT_FALSE(b.units[1].deferred);
}

TEST(Units, EveryParameterInExactlyOneUnit) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    // Random modules over fresh parameters, some repeating an earlier module whole.
    std::vector<std::vector<int>> modules;
    int next = 0;
    const int count = 1 + int(rng() % 12);
    for (int k = 0; k < count; ++k) {
      if (k > 0 && rng() % 4 == 0) {
        modules.push_back(modules[rng() % modules.size()]);
        continue;
      }
      std::vector<int> ps;
      for (int j = 0, n = 1 + int(rng() % 4); j < n; ++j) ps.push_back(next++);
      modules.push_back(ps);
    }
    const UnitAssignment a = assign_units(modules);
    ASSERT_EQ(a.unit_of_module.size(), modules.size());
    std::vector<int> seen(std::size_t(next), 0);
    for (const ParamGroup& u : a.units)
      for (int p : u.params) ++seen[std::size_t(p)];
    for (int c : seen) EXPECT_EQ(c, 1);
    for (std::size_t k = 0; k < modules.size(); ++k) {
      const std::vector<int>& unit = a.units[std::size_t(a.unit_of_module[k])].params;
      for (int p : modules[k]) EXPECT_NE(std::find(unit.begin(), unit.end(), p), unit.end());
    }
  }
}

TEST(Units, BadModulesAreClearErrors) {
  EXPECT_TRUE(test::throws_error([] { assign_units({{0}, {}}, {}, {"embedding", "dropout"}); },
                                 ErrorKind::kInvalidArgument, {"module 'dropout' has no parameters"}));
  EXPECT_TRUE(test::throws_error([] { assign_units({{0, 1}, {1, 2}}); }, ErrorKind::kInvalidArgument,
                                 {"module #1 shares only some of its parameters"}));
  EXPECT_TRUE(test::throws_error([] { assign_units({{0, 0}}); }, ErrorKind::kInvalidArgument,
                                 {"lists parameter 0 twice"}));
}

// ---- flat groups and shard pieces ---------------------------------------------

TEST(FlatLayout, WorkedExampleFromTheHeader) {
  const std::vector<std::int64_t> numels{3, 7, 20, 30};
  const FlatLayout g = flat_layout(numels, 4);
  EXPECT_EQ(g.offsets, (std::vector<std::int64_t>{0, 3, 10, 30}));
  EXPECT_EQ(g.numel, 60);
  EXPECT_EQ(g.padded, 60);
  EXPECT_EQ(g.shard_numel(), 15);
  EXPECT_EQ(shard_pieces(g, 1),
            (std::vector<ShardPiece>{{.member = 2, .offset = 5, .begin = 0, .end = 15, .whole = false}}));
  EXPECT_EQ(shard_pieces(g, 0), (std::vector<ShardPiece>{{0, 0, 0, 3, true}, {1, 0, 3, 10, true}, {2, 0, 10, 15, false}}));
}

TEST(FlatLayout, EveryElementOfEveryMemberInExactlyOnePiece) {
  std::vector<std::vector<std::int64_t>> lists{
      {}, {0}, {1}, {0, 0}, {0, 1, 0}, {2}, {3}, {5}, {7}, {11}, {13}, {2, 3, 5, 7, 11, 13},
      {1, 1, 1, 1, 1}, {17, 0, 19}, {100, 0, 1, 31}, {64, 64, 64}, {9, 8, 7, 6, 5, 4, 3, 2, 1}, {1000003}};
  std::mt19937 rng(99);
  for (int i = 0; i < 60; ++i) {
    std::vector<std::int64_t> l;
    for (int j = 0, n = int(rng() % 10); j < n; ++j) l.push_back(std::int64_t(rng() % (rng() % 2 ? 5 : 300)));
    lists.push_back(l);
  }
  for (const std::vector<std::int64_t>& numels : lists)
    for (int shards = 1; shards <= 9; ++shards) {
      const FlatLayout g = flat_layout(numels, shards);
      std::int64_t total = 0;
      for (std::int64_t n : numels) total += n;
      ASSERT_EQ(g.numel, total);
      EXPECT_EQ(g.padded % shards, 0);
      EXPECT_GE(g.padded, g.numel);
      EXPECT_LT(g.padded - g.numel, shards);
      EXPECT_EQ(g.shard_begin(0), 0);
      EXPECT_EQ(g.shard_end(shards - 1), g.padded);
      for (int r = 1; r < shards; ++r) EXPECT_EQ(g.shard_begin(r), g.shard_end(r - 1));
      // Count how often each element of each member is held, and where.
      std::vector<std::vector<int>> held(numels.size());
      for (std::size_t i = 0; i < numels.size(); ++i) held[i].assign(std::size_t(numels[i]), 0);
      for (int r = 0; r < shards; ++r) {
        std::int64_t prev_end = 0;
        for (const ShardPiece& p : shard_pieces(g, r)) {
          ASSERT_GE(p.member, 0);
          ASSERT_LT(std::size_t(p.member), numels.size());
          EXPECT_GT(p.numel(), 0);
          EXPECT_GE(p.begin, prev_end) << "pieces in buffer order";
          EXPECT_LE(p.end, g.shard_numel());
          prev_end = p.end;
          EXPECT_EQ(g.shard_begin(r) + p.begin, g.offsets[std::size_t(p.member)] + p.offset);
          EXPECT_EQ(p.whole, p.offset == 0 && p.numel() == numels[std::size_t(p.member)]);
          for (std::int64_t e = p.offset; e < p.offset + p.numel(); ++e) ++held[std::size_t(p.member)][std::size_t(e)];
        }
      }
      for (const auto& h : held)
        for (int c : h) ASSERT_EQ(c, 1) << "shards " << shards;
    }
}

TEST(FlatLayout, BadInputsAreClearErrors) {
  const std::vector<std::int64_t> n{4};
  EXPECT_TRUE(test::throws_error([&] { flat_layout(n, 0); }, ErrorKind::kInvalidArgument, {"0 shards"}));
  const FlatLayout g = flat_layout(n, 2);
  EXPECT_TRUE(test::throws_error([&] { shard_pieces(g, 2); }, ErrorKind::kOutOfRange, {"shard 2 outside 2 shards"}));
}

// ---- hybrid sharding -----------------------------------------------------------

// The table of the header, row by row: what DataParallel allocates and the planner sums.
TEST(ZeroBuffers, EachStageKeepsWhatTheTableSays) {
  EXPECT_EQ(zero_buffers(0), (ZeroBuffers{.whole_params = true, .whole_grads = true}));
  EXPECT_EQ(zero_buffers(1), (ZeroBuffers{.whole_params = true, .whole_grads = true}));
  EXPECT_EQ(zero_buffers(2), (ZeroBuffers{.whole_params = true, .whole_grads = false}));
  EXPECT_EQ(zero_buffers(3), (ZeroBuffers{.whole_params = false, .whole_grads = false}));
  EXPECT_TRUE(test::throws_error([] { zero_buffers(4); }, ErrorKind::kConfig, {"--zero 4 must be 0 (DDP), 1, 2 or 3"}));
  EXPECT_TRUE(test::throws_error([] { zero_buffers(-1); }, ErrorKind::kConfig, {"--zero -1"}));
}

TEST(HybridShard, WorkedExampleFromTheHeader) {
  const HybridShard h = hybrid_shard(6, 3, 4, 1);
  EXPECT_EQ(h, (HybridShard{.shards = 3,
                            .shard_rank = 1,
                            .replicas = 2,
                            .replica_rank = 1,
                            .shard_group = {3, 4, 5},
                            .replica_group = {1, 4}}));
  // DDP shards nothing: every dp rank is a replica.
  EXPECT_EQ(hybrid_shard(4, 0, 2, 0), (HybridShard{1, 0, 4, 2, {2}, {0, 1, 2, 3}}));
}

TEST(HybridShard, GroupsCoverDpExactlyOnceForEveryDpAndDivisor) {
  for (int dp = 1; dp <= 16; ++dp)
    for (int zero = 0; zero <= 3; ++zero)
      for (int s = 0; s <= dp; ++s) {
        if (s > 0 && (dp % s != 0 || zero == 0)) continue;
        const int shards = zero == 0 ? 1 : s == 0 ? dp : s;
        std::set<std::vector<int>> shard_groups, replica_groups;
        std::vector<int> in_shard(std::size_t(dp), 0), in_replica(std::size_t(dp), 0);
        for (int r = 0; r < dp; ++r) {
          const HybridShard h = hybrid_shard(dp, s, r, zero);
          ASSERT_EQ(h.shards, shards);
          ASSERT_EQ(h.shards * h.replicas, dp);
          ASSERT_EQ(int(h.shard_group.size()), h.shards);
          ASSERT_EQ(int(h.replica_group.size()), h.replicas);
          EXPECT_EQ(h.shard_group[std::size_t(h.shard_rank)], r);
          EXPECT_EQ(h.replica_group[std::size_t(h.replica_rank)], r);
          for (std::size_t i = 1; i < h.shard_group.size(); ++i)
            EXPECT_EQ(h.shard_group[i], h.shard_group[i - 1] + 1) << "shard groups are consecutive dp ranks";
          for (int q : h.shard_group) {
            const HybridShard o = hybrid_shard(dp, s, q, zero);
            EXPECT_EQ(o.shard_group, h.shard_group) << "members agree";
            EXPECT_EQ(o.replica_rank, h.replica_rank) << "the split colour";
          }
          for (int q : h.replica_group) {
            const HybridShard o = hybrid_shard(dp, s, q, zero);
            EXPECT_EQ(o.replica_group, h.replica_group) << "members agree";
            EXPECT_EQ(o.shard_rank, h.shard_rank) << "the same shard, the split colour";
          }
          // The two groups meet in this rank only.
          int common = 0;
          for (int q : h.shard_group) common += std::count(h.replica_group.begin(), h.replica_group.end(), q) > 0;
          EXPECT_EQ(common, 1);
          shard_groups.insert(h.shard_group);
          replica_groups.insert(h.replica_group);
        }
        for (const auto& g : shard_groups)
          for (int q : g) ++in_shard[std::size_t(q)];
        for (const auto& g : replica_groups)
          for (int q : g) ++in_replica[std::size_t(q)];
        for (int r = 0; r < dp; ++r) {
          EXPECT_EQ(in_shard[std::size_t(r)], 1) << "dp " << dp << " s " << s;
          EXPECT_EQ(in_replica[std::size_t(r)], 1) << "dp " << dp << " s " << s;
        }
      }
}

TEST(HybridShard, BadOptionsAreTheErrorsValidateGives) {
  EXPECT_TRUE(test::throws_error([] { hybrid_shard(6, 4, 0, 1); }, ErrorKind::kConfig,
                                 {"--zero-shard-group 4 must divide the data-parallel size 6 (or be 0 for all of it)",
                                  "{1,2,3,6}"}));
  EXPECT_TRUE(test::throws_error([] { hybrid_shard(6, -1, 0, 1); }, ErrorKind::kConfig, {"--zero-shard-group -1"}));
  EXPECT_TRUE(test::throws_error([] { hybrid_shard(4, 2, 0, 0); }, ErrorKind::kConfig,
                                 {"--zero-shard-group 2 needs a ZeRO stage (--zero 1, 2 or 3)"}));
  EXPECT_TRUE(test::throws_error([] { hybrid_shard(4, 0, 0, 4); }, ErrorKind::kConfig,
                                 {"--zero 4 must be 0 (DDP), 1, 2 or 3"}));
  EXPECT_TRUE(test::throws_error([] { hybrid_shard(4, 0, 4, 1); }, ErrorKind::kInvalidArgument,
                                 {"dp rank 4 outside a data-parallel size of 4"}));
}

// ---- pipeline stage partitions --------------------------------------------------

void expect_valid_partition(const std::vector<int>& b, int n, int stages) {
  ASSERT_EQ(int(b.size()), stages + 1);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), n);
  for (int s = 0; s < stages; ++s) EXPECT_LT(b[std::size_t(s)], b[std::size_t(s) + 1]) << "stage " << s << " empty";
}

// nn::stage_blocks at d69d5a5 (src/nn/gpt.cc), the rule partition_by_count replaces.
std::pair<int, int> stage_blocks_today(int n_layer, int stage, int stages) {
  const int base = n_layer / stages, extra = n_layer % stages;
  const int first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

TEST(Partition, ByCountIsStageBlocks) {
  for (int n = 1; n <= 64; ++n)
    for (int p = 1; p <= n; ++p) {
      const std::vector<int> b = partition_by_count(n, p);
      expect_valid_partition(b, n, p);
      for (int s = 0; s < p; ++s) {
        const std::pair<int, int> want = stage_blocks_today(n, s, p);
        EXPECT_EQ(std::make_pair(b[std::size_t(s)], b[std::size_t(s) + 1]), want) << n << " layers, stage " << s;
        EXPECT_EQ(stage_range(n, s, p), want);
      }
    }
  EXPECT_EQ(partition_by_count(7, 3), (std::vector<int>{0, 3, 5, 7}));
}

// The documented objective by brute force over every partition: least
// heaviest stage (cost, then layers), then greatest lightest stage, then the
// lexicographically greatest boundaries (earlier stages longer).
std::vector<int> brute_force_partition(const std::vector<std::int64_t>& costs, int stages,
                                       std::int64_t* least_max_cost) {
  const int n = int(costs.size());
  using Weight = std::pair<std::int64_t, int>;  // (cost, layers)
  std::vector<int> best, b{0};
  Weight best_max{}, best_min{};
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  std::function<void()> walk = [&] {
    const int s = int(b.size()) - 1;
    if (s == stages - 1) {
      b.push_back(n);
      Weight mx{-1, 0}, mn{std::numeric_limits<std::int64_t>::max(), 0};
      std::int64_t max_cost = 0;
      for (int k = 0; k < stages; ++k) {
        std::int64_t c = 0;
        for (int i = b[std::size_t(k)]; i < b[std::size_t(k) + 1]; ++i) c += costs[std::size_t(i)];
        const Weight w{c, b[std::size_t(k) + 1] - b[std::size_t(k)]};
        mx = std::max(mx, w);
        mn = std::min(mn, w);
        max_cost = std::max(max_cost, c);
      }
      least = std::min(least, max_cost);
      if (best.empty() || mx < best_max || (mx == best_max && (mn > best_min || (mn == best_min && b > best)))) {
        best = b;
        best_max = mx;
        best_min = mn;
      }
      b.pop_back();
      return;
    }
    for (int e = b.back() + 1; e <= n - (stages - s - 1); ++e) {
      b.push_back(e);
      walk();
      b.pop_back();
    }
  };
  walk();
  *least_max_cost = least;
  return best;
}

TEST(Partition, ByCostIsOptimalAgainstBruteForce) {
  std::mt19937 rng(2024);
  int cases = 0;
  for (int n = 1; n <= 10; ++n)
    for (int p = 1; p <= n; ++p)
      for (int trial = 0; trial < 25; ++trial) {
        std::vector<std::int64_t> costs;
        const int range = trial % 3 == 0 ? 2 : trial % 3 == 1 ? 5 : 1000;  // small ranges make ties
        for (int i = 0; i < n; ++i) costs.push_back(std::int64_t(rng() % std::uint32_t(range)));
        std::int64_t least = 0;
        const std::vector<int> want = brute_force_partition(costs, p, &least);
        const std::vector<int> got = partition_by_cost(costs, p);
        expect_valid_partition(got, n, p);
        const std::vector<std::int64_t> sc = stage_costs(costs, got);
        EXPECT_EQ(*std::max_element(sc.begin(), sc.end()), least) << "the largest stage cost is the least possible";
        ASSERT_EQ(got, want) << n << " layers over " << p << " stages, trial " << trial;
        ++cases;
      }
  EXPECT_GT(cases, 1000);
}

TEST(Partition, EqualCostsGiveTheCountRule) {
  for (std::int64_t c : {std::int64_t(0), std::int64_t(1), std::int64_t(3), std::int64_t(1) << 40})
    for (int n = 1; n <= 64; ++n)
      for (int p = 1; p <= n; ++p) {
        const std::vector<std::int64_t> costs(std::size_t(n), c);
        ASSERT_EQ(partition_by_cost(costs, p), partition_by_count(n, p)) << n << " layers of " << c << ", " << p;
      }
}

TEST(Partition, ByCostIsFastAndOptimalForHundredsOfLayersAndStages) {
  std::mt19937 rng(5);
  const auto t0 = std::chrono::steady_clock::now();
  for (int n : {300, 512, 1000})
    for (int p : {1, 2, 7, 64, 150, 300}) {
      std::vector<std::int64_t> costs;
      for (int i = 0; i < n; ++i) costs.push_back(std::int64_t(1000 + rng() % 100000));
      // An embedding and a head much heavier than a block.
      costs.front() *= 20;
      costs.back() *= 30;
      const std::vector<int> b = partition_by_cost(costs, p);
      expect_valid_partition(b, n, p);
      const std::vector<std::int64_t> sc = stage_costs(costs, b);
      const std::int64_t worst = *std::max_element(sc.begin(), sc.end());
      // A certificate of optimality: with every stage below `worst`, greedy
      // packing (which needs the fewest stages) needs more than p.
      int needed = 1;
      std::int64_t load = 0;
      bool impossible = false;
      for (std::int64_t c : costs) {
        if (c > worst - 1) impossible = true;
        if (load + c > worst - 1) {
          ++needed;
          load = c;
        } else {
          load += c;
        }
      }
      EXPECT_TRUE(impossible || needed > p) << n << " layers, " << p << " stages";
      const std::vector<std::int64_t> by_count = stage_costs(costs, partition_by_count(n, p));
      EXPECT_LE(worst, *std::max_element(by_count.begin(), by_count.end()));
    }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 20.0) << "18 partitions of up to 1000 layers";
  std::printf("18 partitions of 300-1000 layers over 1-300 stages: %.2f s\n", seconds);
}

TEST(Partition, BadSizesAreClearErrors) {
  EXPECT_TRUE(test::throws_error([] { partition_by_count(3, 4); }, ErrorKind::kConfig,
                                 {"3 layers cannot fill 4 pipeline stages", "lower --pp to <= 3"}));
  EXPECT_TRUE(test::throws_error([] { partition_by_count(3, 0); }, ErrorKind::kConfig, {"must be positive"}));
  EXPECT_TRUE(test::throws_error([] { stage_range(8, 4, 4); }, ErrorKind::kInvalidArgument,
                                 {"stage 4 outside a pipeline of 4"}));
  EXPECT_TRUE(test::throws_error([] { stage_range(8, 0, 0); }, ErrorKind::kInvalidArgument,
                                 {"stage 0 outside a pipeline of 0"}));
  EXPECT_TRUE(test::throws_error([] { stage_range(3, 0, 4); }, ErrorKind::kConfig,
                                 {"3 layers cannot fill 4 pipeline stages"}));
  const std::vector<std::int64_t> two{1, 2};
  EXPECT_TRUE(test::throws_error([&] { partition_by_cost(two, 3); }, ErrorKind::kConfig,
                                 {"2 layers cannot fill 3 pipeline stages"}));
  const std::vector<std::int64_t> neg{1, -2};
  EXPECT_TRUE(test::throws_error([&] { partition_by_cost(neg, 1); }, ErrorKind::kInvalidArgument,
                                 {"layer 1 costs -2"}));
  const std::vector<std::int64_t> huge{std::numeric_limits<std::int64_t>::max(), 1};
  EXPECT_TRUE(test::throws_error([&] { partition_by_cost(huge, 1); }, ErrorKind::kInvalidArgument,
                                 {"beyond int64"}));
}

// ---- chosen stage boundaries ------------------------------------------------------

// Every way to cut n layers into p non-empty contiguous stages, as layer counts.
void for_each_composition(int n, int p, const std::function<void(const std::vector<int>&)>& fn) {
  std::vector<int> counts;
  std::function<void(int)> rec = [&](int left) {
    if (int(counts.size()) == p - 1) {
      counts.push_back(left);
      fn(counts);
      counts.pop_back();
      return;
    }
    for (int c = 1; c <= left - (p - 1 - int(counts.size())); ++c) {
      counts.push_back(c);
      rec(left - c);
      counts.pop_back();
    }
  };
  rec(n);
}

TEST(ChosenStages, EveryContiguousSplitRunsEachLayerOnce) {
  int splits = 0;
  for (int n = 1; n <= 12; ++n)
    for (int p = 1; p <= n; ++p)
      for_each_composition(n, p, [&](const std::vector<int>& counts) {
        ++splits;
        const std::vector<int> b = stage_boundaries(counts, p);
        expect_valid_partition(b, n, p);
        EXPECT_EQ(layers_per_stage(b), counts);
        EXPECT_NO_THROW(validate_boundaries(b, n, p));
        std::vector<int> stage_of(std::size_t(n), -1);
        for (int s = 0; s < p; ++s) {
          const auto [first, last] = stage_range(n, s, p, b);
          EXPECT_EQ(last - first, counts[std::size_t(s)]) << "stage " << s;
          for (int l = first; l < last; ++l) {
            EXPECT_EQ(stage_of[std::size_t(l)], -1) << "layer " << l << " on two stages";
            stage_of[std::size_t(l)] = s;
          }
        }
        // Each layer on exactly one stage, in stage order.
        EXPECT_TRUE(std::is_sorted(stage_of.begin(), stage_of.end()));
        EXPECT_EQ(std::count(stage_of.begin(), stage_of.end(), -1), 0);
      });
  EXPECT_EQ(splits, (1 << 12) - 1);  // sum over n of 2^(n-1) compositions
  EXPECT_EQ(stage_boundaries({3, 5, 5, 3}, 4), (std::vector<int>{0, 3, 8, 13, 16}));
  EXPECT_EQ(stage_range(16, 1, 4, {0, 3, 8, 13, 16}), std::make_pair(3, 8));
}

TEST(ChosenStages, NoBoundariesIsByCount) {
  for (int n = 1; n <= 32; ++n)
    for (int p = 1; p <= n; ++p) {
      EXPECT_TRUE(stage_boundaries({}, p).empty());
      EXPECT_NO_THROW(validate_boundaries({}, n, p));
      for (int s = 0; s < p; ++s) EXPECT_EQ(stage_range(n, s, p, {}), stage_range(n, s, p));
      // The split by count given explicitly is the same split.
      const std::vector<int> b = partition_by_count(n, p);
      EXPECT_EQ(stage_boundaries(layers_per_stage(b), p), b);
    }
}

// Every short vector of small values (the malformed ones included) against
// the definition: accepted exactly when it is empty or has p + 1 entries from
// 0 to n, strictly increasing; refused with kConfig otherwise.
TEST(ChosenStages, ValidateAcceptsExactlyTheContiguousSplits) {
  for (int n = 1; n <= 4; ++n)
    for (int p = 1; p <= n; ++p)
      for (int len = 0; len <= p + 2; ++len) {
        std::vector<int> b(std::size_t(len), -1);
        while (true) {
          bool valid = b.empty();
          if (len == p + 1) {
            valid = b.front() == 0 && b.back() == n;
            for (int s = 0; s < p; ++s) valid = valid && b[std::size_t(s)] < b[std::size_t(s) + 1];
          }
          if (valid) {
            EXPECT_NO_THROW(validate_boundaries(b, n, p));
          } else {
            EXPECT_TRUE(test::throws_error([&] { validate_boundaries(b, n, p); }, ErrorKind::kConfig, {"e.g. --stage-layers"}))
                << n << " layers, " << p << " stages, boundaries " << ::testing::PrintToString(b);
          }
          // Next vector of values in [-1, n + 1].
          std::size_t i = 0;
          while (i < b.size() && b[i] == n + 1) b[i++] = -1;
          if (i == b.size()) break;
          ++b[i];
        }
      }
}

TEST(ChosenStages, BadSplitsAreClearErrors) {
  // What users type: the wrong count of stages, a zero, a sum other than the layer count.
  EXPECT_TRUE(test::throws_error([] { stage_boundaries({3, 5, 5}, 4); }, ErrorKind::kConfig,
                                 {"--stage-layers 3,5,5 gives 3 pipeline stages but the pipeline has 4 (--pp 4)",
                                  "one layer count per stage", "e.g. --stage-layers 4,3,3,3 (13 layers, split by count)"}));
  EXPECT_TRUE(test::throws_error([] { stage_boundaries({3, 0, 5, 8}, 4); }, ErrorKind::kConfig,
                                 {"--stage-layers 3,0,5,8: stage 1 would hold 0 layers", "at least one",
                                  "e.g. --stage-layers 4,4,4,4 (16 layers, split by count)"}));
  EXPECT_TRUE(test::throws_error([] { stage_boundaries({2, -1}, 2); }, ErrorKind::kConfig,
                                 {"stage 1 would hold -1 layers", "e.g. --stage-layers 1,1 (2 layers"}));
  EXPECT_TRUE(test::throws_error([] { stage_boundaries({std::numeric_limits<int>::max(), 1}, 2); },
                                 ErrorKind::kConfig, {"add up beyond"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({0, 3, 8, 13, 16}, 15, 4); }, ErrorKind::kConfig,
                                 {"--stage-layers 3,5,5,3 sums to 16 layers but the model has 15",
                                  "e.g. --stage-layers 4,4,4,3 (the split by count)"}));
  EXPECT_TRUE(test::throws_error([] { stage_range(4, 0, 2, {0, 1, 5}); }, ErrorKind::kConfig,
                                 {"--stage-layers 1,4 sums to 5 layers but the model has 4", "e.g. --stage-layers 2,2"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({0, 3, 3, 6}, 6, 3); }, ErrorKind::kConfig,
                                 {"--stage-layers 3,0,3: stage 1 would hold 0 layers"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({0, 3, 6}, 6, 3); }, ErrorKind::kConfig,
                                 {"make 2 stages but the pipeline has 3", "e.g. --stage-layers 2,2,2"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({1, 3, 6}, 6, 2); }, ErrorKind::kConfig,
                                 {"start at layer 1"}));
  // The sizes themselves, as partition_by_count refuses them.
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({0, 1, 2, 3, 4}, 3, 4); }, ErrorKind::kConfig,
                                 {"3 layers cannot fill 4 pipeline stages"}));
  EXPECT_TRUE(test::throws_error([] { stage_range(4, 2, 2, {0, 1, 4}); }, ErrorKind::kInvalidArgument,
                                 {"stage 2 outside a pipeline of 2"}));
}

// The --stage-layers value an error offers ("e.g. --stage-layers 2,2,1,1 (...)"), or empty.
std::vector<int> offered_split(const std::string& message) {
  const std::string key = "e.g. --stage-layers ";
  const std::size_t at = message.find(key);
  std::vector<int> counts;
  if (at == std::string::npos) return counts;
  const std::size_t begin = at + key.size();
  std::string value = message.substr(begin, message.find(' ', begin) - begin);  // "2,2,1,1"
  for (std::size_t i = 0; i < value.size();) {
    const std::size_t comma = std::min(value.find(',', i), value.size());
    counts.push_back(std::stoi(value.substr(i, comma - i)));
    i = comma + 1;
  }
  return counts;
}

// Under the interleaved schedule --stage-layers has one count per virtual
// stage (pp x v of them): the errors say so, name pp x v, and offer a value
// that works; none speaks of "pipeline stages" or --pp alone.
TEST(ChosenStages, InterleavedErrorsSpeakOfVirtualStages) {
  // pp 2 x v 2: 4 virtual stages.
  EXPECT_TRUE(test::throws_error([] { stage_boundaries({3, 3}, 4, 2); }, ErrorKind::kConfig,
                                 {"--stage-layers 3,3 gives 2 virtual stages but the interleaved pipeline has 4 "
                                  "virtual stages (--pp 2 x --virtual-stages 2)",
                                  "one layer count per virtual stage", "e.g. --stage-layers 2,2,1,1 (6 layers"}));
  EXPECT_TRUE(test::throws_error([] { stage_boundaries({2, 0, 2, 2}, 4, 2); }, ErrorKind::kConfig,
                                 {"virtual stage 1 would hold 0 layers", "every virtual stage needs at least one",
                                  "e.g. --stage-layers 2,2,1,1"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({0, 1, 2, 3, 4}, 6, 4, 2); }, ErrorKind::kConfig,
                                 {"--stage-layers 1,1,1,1 sums to 4 layers but the model has 6",
                                  "the layers per virtual stage must sum to 6",
                                  "e.g. --stage-layers 2,2,1,1 (the split by count over 4 virtual stages)"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({0, 3, 6}, 6, 4, 2); }, ErrorKind::kConfig,
                                 {"make 2 virtual stages but the interleaved pipeline has 4 virtual stages (--pp 2 x "
                                  "--virtual-stages 2)",
                                  "e.g. --stage-layers 2,2,1,1"}));
  EXPECT_TRUE(test::throws_error([] { validate_boundaries({}, 3, 4, 2); }, ErrorKind::kConfig,
                                 {"3 layers cannot fill 4 virtual stages (--pp 2 x --virtual-stages 2",
                                  "whose product is <= 3"}));
  // pp 3 x v 3, and the value the errors offer is accepted.
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{5, 5, 5}, {2, 2, 2, 2, 2, 2, 2, 2, 0}, {1}}) {
    try {
      stage_boundaries(bad, 9, 3);
      ADD_FAILURE() << "accepted " << ::testing::PrintToString(bad);
    } catch (const Error& e) {
      const std::string m = e.message();
      EXPECT_NE(m.find("virtual stage"), std::string::npos) << m;
      EXPECT_EQ(m.find("pipeline stage"), std::string::npos) << m;
      if (bad.size() != 9) EXPECT_NE(m.find("has 9 virtual stages (--pp 3 x --virtual-stages 3)"), std::string::npos) << m;
      const std::vector<int> offered = offered_split(m);
      EXPECT_EQ(offered.size(), 9u) << m;
      EXPECT_NO_THROW(stage_boundaries(offered, 9, 3)) << m;
    }
  }
}

// Every refused --stage-layers, at every pipeline and virtual-stage count,
// offers a value that the same check accepts (validate_boundaries: for the
// model's layer count).
TEST(ChosenStages, EveryRefusalOffersAValueThatWorks) {
  int refusals = 0;
  for (int v = 1; v <= 3; ++v)
    for (int pp = 1; pp <= 3; ++pp) {
      const int stages = pp * v;
      for (int len = 1; len <= stages + 1; ++len)
        for (int fill = -1; fill <= 3; ++fill) {
          std::vector<int> counts(std::size_t(len), fill);
          counts.back() = 2;  // not all equal
          for (int n = stages; n <= stages + 4; ++n) {
            std::string message;
            try {
              validate_boundaries(stage_boundaries(counts, stages, v), n, stages, v);
              continue;
            } catch (const Error& e) {
              message = e.message();
            }
            ++refusals;
            EXPECT_EQ(message.find(v > 1 ? "pipeline stage" : "virtual stage"), std::string::npos) << message;
            const std::vector<int> offered = offered_split(message);
            ASSERT_EQ(int(offered.size()), stages) << message;
            EXPECT_NO_THROW(stage_boundaries(offered, stages, v)) << message;
            // A value offered knowing the model's layer count fits it.
            if (message.find("the split by count)") != std::string::npos ||
                message.find("the split by count over") != std::string::npos)
              EXPECT_NO_THROW(validate_boundaries(stage_boundaries(offered, stages, v), n, stages, v)) << message;
          }
        }
    }
  EXPECT_GT(refusals, 100);
}

}  // namespace
}  // namespace ht::parallel
