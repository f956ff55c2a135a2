// The merge of flight-recorder dumps on hand-written entries: who is behind,
// who is stuck in what, missing dumps, healthy groups, point-to-point entries
// ignored, the JSON form, and reading dumps written by FlightRecorder itself.
#include "ht/comm/flight_analysis.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ht/core/error.h"
#include "test_util.h"

namespace ht::comm {
namespace {

constexpr std::int64_t kT0 = 1'700'000'000'000'000;  // microseconds since the epoch

FlightEntry entry(const char* op, const char* group, std::uint64_t seq, OpState state, std::int64_t count = 1000,
                  std::int64_t start_us = kT0) {
  FlightEntry e;
  e.seq = seq;
  std::strncpy(e.op, op, sizeof e.op - 1);
  std::strncpy(e.group, group, sizeof e.group - 1);
  e.count = count;
  e.dtype = DType::kF32;
  e.state = state;
  e.enqueue_us = start_us;
  e.start_us = state == OpState::kEnqueued ? 0 : start_us;
  e.end_us = state == OpState::kCompleted ? start_us + 10 : 0;
  return e;
}

// Ranks 0..n-1 completed all_reduce #1..#done on `group`.
FlightDump dump(int rank, std::uint64_t done, const char* group = "world") {
  FlightDump d;
  d.rank = rank;
  d.host = "node0";
  d.dump_us = kT0 + 2'000'000;
  for (std::uint64_t s = 1; s <= done; ++s) d.entries.push_back(entry("all_reduce", group, s, OpState::kCompleted));
  return d;
}

// The timeout test's picture: ranks 0..2 timed out in #4, rank 3 stopped after #3.
std::vector<FlightDump> skipped_collective() {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r) {
    dumps.push_back(dump(r, 3));
    if (r != 3) dumps.back().entries.push_back(entry("all_reduce", "world", 4, OpState::kTimedOut));
  }
  return dumps;
}

TEST(FlightAnalysis, NamesTheRankBehindAndTheCollectiveTheOthersAreStuckIn) {
  const FlightAnalysis a = analyse_flight_dumps(skipped_collective());
  EXPECT_EQ(a.world_size, 4);
  EXPECT_TRUE(a.missing.empty());
  ASSERT_EQ(a.groups.size(), 1u);
  const GroupAnalysis& g = a.groups[0];
  EXPECT_EQ(g.group, "world");
  EXPECT_EQ(g.frontier, 4u);
  EXPECT_EQ(g.behind, std::vector<int>{3});
  EXPECT_EQ(g.stuck, (std::vector<int>{0, 1, 2}));
  ASSERT_TRUE(g.stuck_op.has_value());
  EXPECT_EQ(g.stuck_op->seq, 4u);
  EXPECT_DOUBLE_EQ(g.stuck_for_s, 2.0);
  EXPECT_EQ(g.ranks[0].enqueued, 4u);
  EXPECT_EQ(g.ranks[0].started, 4u);
  EXPECT_EQ(g.ranks[0].completed, 3u);
  EXPECT_EQ(g.ranks[3].enqueued, 3u);
  EXPECT_EQ(g.summary,
            "group 'world': rank 3 is behind: last entered all_reduce #3; ranks 0,1,2 are stuck in all_reduce #4 "
            "(1000 x f32), started 2.0 s before the dump (timed_out)");
  EXPECT_FALSE(g.healthy());

  const std::string text = format_flight_analysis(a, skipped_collective());
  EXPECT_NE(text.find("# ht-flight-recorder: 4 dumps from a world of 4 ranks"), std::string::npos) << text;
  EXPECT_NE(text.find(g.summary), std::string::npos) << text;
}

TEST(FlightAnalysis, NamesRanksWithoutADump) {
  std::vector<FlightDump> dumps = skipped_collective();
  dumps.pop_back();  // rank 3 left no dump
  const FlightAnalysis a = analyse_flight_dumps(dumps, /*world_size=*/4);
  EXPECT_EQ(a.missing, std::vector<int>{3});
  ASSERT_EQ(a.groups.size(), 1u);
  const GroupAnalysis& g = a.groups[0];
  EXPECT_EQ(g.no_dump, std::vector<int>{3});
  EXPECT_TRUE(g.behind.empty());
  EXPECT_EQ(g.summary,
            "group 'world': no dump from rank 3; ranks 0,1,2 are stuck in all_reduce #4 (1000 x f32), started 2.0 s "
            "before the dump (timed_out)");
  EXPECT_NE(format_flight_analysis(a, dumps).find("# no dump from rank 3"), std::string::npos);
}

TEST(FlightAnalysis, SubGroupsAndHealthyGroups) {
  // tp.0 = {0, 1} healthy at #5; tp.1 = {2, 3}: rank 2 is still in broadcast #2
  // (not started), rank 3 went no further than #1.
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r) dumps.push_back(dump(r, 0));
  for (int r : {0, 1})
    for (std::uint64_t s = 1; s <= 5; ++s)
      dumps[r].entries.push_back(entry("all_reduce", "tp.0", s, OpState::kCompleted));
  for (int r : {2, 3}) dumps[r].entries.push_back(entry("all_gather", "tp.1", 1, OpState::kCompleted, 8));
  FlightEntry b = entry("broadcast", "tp.1", 2, OpState::kEnqueued, 16, kT0 + 500'000);
  b.peer = 0;
  dumps[2].entries.push_back(b);
  // Point-to-point numbers are per rank: they must not make anyone look behind.
  dumps[0].entries.push_back(entry("send", "tp.0", 9, OpState::kStarted));

  const FlightAnalysis a = analyse_flight_dumps(dumps);
  ASSERT_EQ(a.groups.size(), 2u);  // no world entries and no missing rank: no "world" group
  EXPECT_EQ(a.groups[0].group, "tp.0");
  EXPECT_TRUE(a.groups[0].healthy());
  EXPECT_EQ(a.groups[0].summary, "group 'tp.0': ok: ranks 0,1 completed every collective up to #5");
  const GroupAnalysis& g = a.groups[1];
  EXPECT_EQ(g.group, "tp.1");
  EXPECT_EQ(g.behind, std::vector<int>{3});
  EXPECT_EQ(g.stuck, std::vector<int>{2});
  EXPECT_EQ(g.summary,
            "group 'tp.1': rank 3 is behind: last entered all_gather #1; rank 2 is stuck in broadcast #2 (16 x f32, "
            "root 0), enqueued (not started) 1.5 s before the dump");
}

TEST(FlightAnalysis, OperationThatHungOnEveryRank) {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 2; ++r) {
    dumps.push_back(dump(r, 1));
    dumps.back().entries.push_back(entry("barrier", "world", 2, OpState::kStarted, 0));
  }
  const FlightAnalysis a = analyse_flight_dumps(dumps);
  EXPECT_EQ(a.groups.at(0).summary,
            "group 'world': ranks 0,1 are stuck in barrier #2, started 2.0 s before the dump; no rank is behind: the "
            "operation itself did not finish");
}

TEST(FlightAnalysis, JsonHoldsTheVerdict) {
  const std::vector<FlightDump> dumps = skipped_collective();
  const auto doc = nlohmann::json::parse(flight_analysis_json(analyse_flight_dumps(dumps), dumps));
  EXPECT_EQ(doc.at("world_size"), 4);
  const auto& g = doc.at("groups").at(0);
  EXPECT_EQ(g.at("group"), "world");
  EXPECT_EQ(g.at("behind"), nlohmann::json::array({3}));
  EXPECT_EQ(g.at("stuck"), nlohmann::json::array({0, 1, 2}));
  EXPECT_EQ(g.at("stuck_op").at("op"), "all_reduce");
  EXPECT_EQ(g.at("stuck_op").at("seq"), 4);
  EXPECT_EQ(g.at("ranks").at(3).at("completed"), 3);
  EXPECT_EQ(g.at("healthy"), false);
}

TEST(FlightAnalysis, ReadsWhatTheRecorderDumps) {
  namespace fs = std::filesystem;
  const test::TempDir tmp("ht_flight_analysis_test");  // removed at the end, pass or fail
  const fs::path dir = tmp.path();
  for (int r = 0; r < 2; ++r) {
    FlightRecorder rec(8);
    for (std::uint64_t s = 1; s <= 3; ++s) {
      const auto id = rec.record("all_reduce", "world", s, 1000, DType::kBF16, -1);
      if (s < 3 || r == 1) rec.update(id, OpState::kCompleted);
    }
    rec.dump(dir.string(), r, "test");
  }
  const std::vector<FlightDump> dumps = read_flight_dumps({dir.string()});
  ASSERT_EQ(dumps.size(), 2u);
  EXPECT_EQ(dumps[1].rank, 1);
  EXPECT_EQ(dumps[1].reason, "test");
  ASSERT_EQ(dumps[0].entries.size(), 3u);
  EXPECT_EQ(dumps[0].entries[2].dtype, DType::kBF16);
  EXPECT_EQ(dumps[0].entries[2].state, OpState::kEnqueued);
  const FlightAnalysis a = analyse_flight_dumps(dumps);
  EXPECT_EQ(a.groups.at(0).stuck, std::vector<int>{0});

  // A malformed dump names its file; a directory without dumps says what to pass.
  const fs::path bad = dir / "flight_recorder_rank2.json";
  std::ofstream(bad) << "{\"rank\": 2, \"entries\": [{\"seq\": 1}]}";
  try {
    read_flight_dumps({dir.string()});
    FAIL() << "a malformed dump was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find(bad.string()), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_THROW(read_flight_dumps({dir.string()}), Error);
  EXPECT_THROW(read_flight_dumps({(dir / "nothing.json").string()}), IoError);
}

}  // namespace
}  // namespace ht::comm
