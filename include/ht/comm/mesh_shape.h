// The rank arithmetic of a 3-D mesh pp x dp x tp, as pure functions: no
// communicator, so every shape can be tested exhaustively.
//
// Rank order is tp fastest, then dp, then pp:
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank)
// so a tensor-parallel group is a run of consecutive ranks (one node's GPUs),
// and pipeline stages are the slowest-varying coordinate.
// Worked example, world 8, tp 2, pp 2 (dp 2): rank 5 = tp 1, dp 0, pp 1;
// its tp group is {4, 5}, its dp group {5, 7}, its pp group {1, 5}.
#pragma once

#include <string>
#include <vector>

namespace ht::comm {

enum class MeshAxis { kTp, kDp, kPp };

struct MeshCoord {
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;
  friend bool operator==(const MeshCoord&, const MeshCoord&) = default;
};

class MeshShape {
 public:
  /// Throws kConfig naming the sizes when tp * pp does not divide world,
  /// listing the valid choices.
  MeshShape(int world_size, int tp, int pp);

  int world_size() const { return world_; }
  int tp_size() const { return tp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int size(MeshAxis axis) const;

  MeshCoord coord(int rank) const;
  int rank(const MeshCoord& c) const;
  /// The ranks of `rank`'s group along `axis`, in increasing coordinate order.
  std::vector<int> group(int rank, MeshAxis axis) const;
  /// Which group along `axis` the rank belongs to (the split colour): the
  /// same for all members, distinct between groups, in [0, world / size(axis)).
  int group_index(int rank, MeshAxis axis) const;
  /// "pp2 x dp2 x tp2"
  std::string str() const;

 private:
  int world_, tp_, dp_, pp_;
};

std::string axis_name(MeshAxis axis);

}  // namespace ht::comm
