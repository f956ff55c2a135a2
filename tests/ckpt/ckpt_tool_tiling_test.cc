// The checks behind ht-ckpt verify and export: tiling_problems (pure: gaps,
// overlaps, ranges past a part, inconsistent pieces) and assemble_tensor
// (the full tensor from pieces in rank files, as Checkpointer::load_latest
// and ht-ckpt export read it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckpt/assemble.h"
#include "ckpt/rank_file.h"
#include "ht/nn/tensor_parallel.h"
#include "test_util.h"

namespace ht::ckpt::detail {
namespace {

namespace fs = std::filesystem;

// A piece of (w, master) of global shape `shape`, tp part `tp_rank` of `tp_size`.
PieceInfo piece(Shape shape, int split_dim, int tp_rank, int tp_size, std::int64_t begin, std::int64_t end,
                int parts = 1) {
  PieceInfo p;
  p.tensor = "w";
  p.kind = "master";
  p.global_shape = std::move(shape);
  p.layout = {.tp_split_dim = split_dim, .tp_rank = tp_rank, .tp_size = tp_size, .tp_parts = parts};
  p.begin = begin;
  p.end = end;
  p.file = fmt::format("rank_{:05d}.h5", tp_rank);
  p.dataset = dataset_name(p);
  return p;
}

std::string joined(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, "\n")); }

TEST(CkptToolTiling, ExactTilingsHaveNoProblems) {
  EXPECT_TRUE(tiling_problems({}).empty());
  // Replicated, one piece; and split into uneven ZeRO shards (one empty).
  EXPECT_TRUE(tiling_problems({piece({8, 4}, -1, 0, 1, 0, 32)}).empty());
  EXPECT_TRUE(tiling_problems({piece({8, 4}, -1, 0, 1, 20, 32), piece({8, 4}, -1, 0, 1, 0, 7),
                               piece({8, 4}, -1, 0, 1, 7, 7), piece({8, 4}, -1, 0, 1, 7, 20)})
                  .empty());
  // Column-parallel over tp 2 (16 elements a part), each part in 2 shards; and a packed QKV split.
  EXPECT_TRUE(tiling_problems({piece({8, 4}, 0, 0, 2, 0, 5), piece({8, 4}, 0, 0, 2, 5, 16),
                               piece({8, 4}, 0, 1, 2, 9, 16), piece({8, 4}, 0, 1, 2, 0, 9)})
                  .empty());
  EXPECT_TRUE(tiling_problems({piece({12}, 0, 0, 2, 0, 6, 3), piece({12}, 0, 1, 2, 0, 6, 3)}).empty());
}

TEST(CkptToolTiling, GapsOverlapsAndOverrunsAreEachNamed) {
  // Part size 10: [0,4) [3,8) [9,12) -> overlap [3,4), gap [8,9), past the end.
  const auto p =
      tiling_problems({piece({10}, -1, 0, 1, 0, 4), piece({10}, -1, 0, 1, 3, 8), piece({10}, -1, 0, 1, 9, 12)});
  ASSERT_EQ(p.size(), 3u) << joined(p);
  EXPECT_NE(p[0].find("w (master): elements [3, 4) are in more than one piece"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("w (master): elements [8, 9) of 10 are in no piece (gap before 'w|master|0|9'"),
            std::string::npos)
      << p[1];
  EXPECT_NE(p[2].find("ends at element 12, past the part's 10 elements"), std::string::npos) << p[2];

  // A tp part with no piece at all, and a short one.
  const auto q = tiling_problems({piece({8, 4}, 0, 0, 2, 0, 12)});
  ASSERT_EQ(q.size(), 2u) << joined(q);
  EXPECT_NE(q[0].find("w (master), tp part 0: elements [12, 16) of 16 are in no piece"), std::string::npos) << q[0];
  EXPECT_NE(q[1].find("w (master), tp part 1: elements [0, 16) of 16 are in no piece"), std::string::npos) << q[1];

  const auto r = tiling_problems({piece({10}, -1, 0, 1, 0, 10), piece({10}, -1, 0, 1, 6, 4)});
  ASSERT_EQ(r.size(), 1u) << joined(r);
  EXPECT_NE(r[0].find("invalid range [6, 4)"), std::string::npos) << r[0];
}

TEST(CkptToolTiling, InconsistentPiecesAreNamed) {
  const auto shape = tiling_problems({piece({8, 4}, -1, 0, 1, 0, 16), piece({4, 4}, -1, 0, 1, 16, 32)});
  ASSERT_EQ(shape.size(), 1u) << joined(shape);
  EXPECT_NE(shape[0].find("has global shape [4, 4] where 'w|master|0|0' has [8, 4]"), std::string::npos);

  const auto layout = tiling_problems({piece({8, 4}, 0, 0, 2, 0, 16), piece({8, 4}, 1, 1, 2, 0, 16)});
  ASSERT_EQ(layout.size(), 1u) << joined(layout);
  EXPECT_NE(layout[0].find("tensor-parallel layout (split dim 1"), std::string::npos) << layout[0];

  const auto rank =
      tiling_problems({piece({8, 4}, 0, 0, 2, 0, 16), piece({8, 4}, 0, 1, 2, 0, 16), piece({8, 4}, 0, 2, 2, 0, 16)});
  ASSERT_EQ(rank.size(), 1u) << joined(rank);
  EXPECT_NE(rank[0].find("is for tp rank 2, outside a group of 2"), std::string::npos) << rank[0];

  const auto split = tiling_problems({piece({9, 4}, 0, 0, 2, 0, 18), piece({9, 4}, 0, 1, 2, 0, 18)});
  ASSERT_EQ(split.size(), 1u) << joined(split);
  EXPECT_NE(split[0].find("does not split as its layout says"), std::string::npos) << split[0];
}

// Writes the tp parts of `full` (packed QKV-like: 3 stacked pieces split over
// tp 2) as uneven shards into two rank files, as ZeRO-3 would, and assembles it back.
class CkptToolAssemble : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / fmt::format("ht_ckpt_tool_assemble_{}", ::getpid())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(7);
    full_ = test::random_tensor({12, 3}, rng);  // 12 = 3 stacked pieces x tp 2 x chunk 2
    std::vector<Piece> file0, file1;
    for (int r = 0; r < 2; ++r) {
      nn::ParamLayout l{.tp_split_dim = 0, .tp_rank = r, .tp_size = 2, .tp_parts = 3};
      const Tensor part = nn::tp_part_of(full_, l).view({-1});  // 18 elements
      for (auto [b, e] : {std::pair{0, 5}, std::pair{5, 18}}) {
        Piece p;
        p.info = piece({12, 3}, 0, r, 2, b, e, 3);
        p.data = part.slice(b, e).clone();
        (b == 0 ? file0 : file1).push_back(std::move(p));
      }
    }
    write_rank_file(dir_ + "/rank_00000.h5", file0);
    write_rank_file(dir_ + "/rank_00001.h5", file1);
    for (const char* name : {"rank_00000.h5", "rank_00001.h5"})
      for (PieceInfo& p : read_piece_index(dir_ + "/" + name, name)) pieces_.push_back(std::move(p));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  Tensor full_;
  std::vector<PieceInfo> pieces_;
};

TEST_F(CkptToolAssemble, FullTensorFromShardedPieces) {
  ASSERT_EQ(pieces_.size(), 4u);
  EXPECT_TRUE(tiling_problems(pieces_).empty()) << joined(tiling_problems(pieces_));
  const Tensor got = assemble_tensor(dir_, pieces_);
  EXPECT_EQ(got.shape(), (Shape{12, 3}));
  EXPECT_EQ(got.to_vector<float>(), full_.to_vector<float>());
  ASSERT_EQ(pieces_by_tensor(pieces_).size(), 1u);
  EXPECT_EQ(pieces_by_tensor(pieces_).begin()->first, "w|master");
}

TEST_F(CkptToolAssemble, MissingShardOrBadChecksumThrowsNamingIt) {
  std::vector<PieceInfo> gap = pieces_;
  gap.erase(gap.begin());  // part 0's first shard
  try {
    assemble_tensor(dir_, gap);
    ADD_FAILURE() << "a missing shard was not noticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("lacks a shard of w (master): tp part 0"), std::string::npos) << e.message();
  }
  std::vector<PieceInfo> bad = pieces_;
  bad[1].checksum ^= 1;
  try {
    assemble_tensor(dir_, bad);
    ADD_FAILURE() << "a wrong checksum was not noticed";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(fmt::format("dataset '{}' fails its checksum", bad[1].dataset)), std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace ht::ckpt::detail
