// The rank arithmetic of a 4-D mesh pp x dp x cp x tp, as pure functions:
// no communicator, so every shape can be tested exhaustively.
//
// Rank order is tp fastest, then cp (context parallelism: one sequence split
// over cp ranks), then dp, then pp (Megatron-Core's order):
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
// so a tensor-parallel group is a run of consecutive ranks (one node's GPUs),
// a context-parallel group the next closest, and pipeline stages are the
// slowest-varying coordinate.
// Worked example, world 8, tp 2, pp 2 (dp 2): rank 5 = tp 1, dp 0, pp 1;
// its tp group is {4, 5}, its dp group {5, 7}, its pp group {1, 5}.
//
// The dp x cp axis (kDpCp) groups the ranks that hold the same parameters
// (the same tp and pp coordinates): the data-parallel ranks and, within
// each, the context-parallel ones, which see other positions of the same
// rows. Gradients are reduced and ZeRO state sharded over it; the data is
// split over dp alone. Its coordinate is cp_rank + cp * dp_rank.
#pragma once

#include <string>
#include <vector>

namespace ht::comm {

enum class MeshAxis { kTp, kCp, kDp, kPp, kDpCp };

struct MeshCoord {
  int tp_rank = 0, dp_rank = 0, pp_rank = 0, cp_rank = 0;
  friend bool operator==(const MeshCoord&, const MeshCoord&) = default;
};

class MeshShape {
 public:
  /// Throws kConfig naming the sizes when tp * pp * cp does not divide
  /// world, listing the valid choices.
  MeshShape(int world_size, int tp, int pp, int cp = 1);

  int world_size() const { return world_; }
  int tp_size() const { return tp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int cp_size() const { return cp_; }
  int size(MeshAxis axis) const;

  MeshCoord coord(int rank) const;
  int rank(const MeshCoord& c) const;
  /// The coordinate along kDpCp: cp_rank + cp * dp_rank.
  int dp_cp_rank(const MeshCoord& c) const { return c.cp_rank + cp_ * c.dp_rank; }
  /// c's coordinate along `axis` (its rank in that group).
  int coordinate(const MeshCoord& c, MeshAxis axis) const;
  /// The ranks of `rank`'s group along `axis`, in increasing coordinate order.
  std::vector<int> group(int rank, MeshAxis axis) const;
  /// Which group along `axis` the rank belongs to (the split colour): the
  /// same for all members, distinct between groups, in [0, world / size(axis)).
  int group_index(int rank, MeshAxis axis) const;
  /// "pp2 x dp2 x tp2", with " x cp2" before tp when cp > 1.
  std::string str() const;

 private:
  int world_, tp_, dp_, pp_, cp_;
};

std::string axis_name(MeshAxis axis);

}  // namespace ht::comm
